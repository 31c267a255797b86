{{/* Names. Dots become dashes: pod names are worker ids ([A-Za-z0-9_-]). */}}
{{- define "actloop.name" -}}
{{- default .Chart.Name .Values.nameOverride | replace "." "-" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "actloop.fullname" -}}
{{- $name := "" }}
{{- if .Values.fullnameOverride }}
{{- $name = .Values.fullnameOverride }}
{{- else }}
{{- $base := default .Chart.Name .Values.nameOverride }}
{{- if contains $base .Release.Name }}
{{- $name = .Release.Name }}
{{- else }}
{{- $name = printf "%s-%s" .Release.Name $base }}
{{- end }}
{{- end }}
{{- $name | replace "." "-" | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "actloop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels: (dict "ctx" $ "component" "coordinator" ["group" "r0"]). */}}
{{- define "actloop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "actloop.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with get . "group" }}
actloop/group: {{ . }}
{{- end }}
{{- end }}

{{- define "actloop.labels" -}}
helm.sh/chart: {{ include "actloop.chart" .ctx }}
{{ include "actloop.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: actloop
{{- end }}

{{- define "actloop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "actloop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Images: (dict "ctx" $ "image" .Values.image). */}}
{{- define "actloop.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .ctx.Chart.AppVersion | toString) }}
{{- end }}

{{/* Secrets: the chart's, unless an existing one is named. */}}
{{- define "actloop.secretName" -}}
{{- include "actloop.fullname" . }}
{{- end }}

{{- define "actloop.natsSecretName" -}}
{{- .Values.nats.existingSecret.name | default (include "actloop.secretName" .) }}
{{- end }}

{{- define "actloop.natsUrlKey" -}}
{{- if .Values.nats.existingSecret.name }}{{ .Values.nats.existingSecret.urlKey }}{{ else }}nats-url{{ end }}
{{- end }}

{{- define "actloop.natsPasswordKey" -}}
{{- if .Values.nats.existingSecret.name }}{{ .Values.nats.existingSecret.passwordKey }}{{ else }}nats-password{{ end }}
{{- end }}

{{- define "actloop.redisSecretName" -}}
{{- .Values.redis.existingSecret.name | default (include "actloop.secretName" .) }}
{{- end }}

{{- define "actloop.redisUrlKey" -}}
{{- if .Values.redis.existingSecret.name }}{{ .Values.redis.existingSecret.urlKey }}{{ else }}redis-url{{ end }}
{{- end }}

{{- define "actloop.redisPasswordKey" -}}
{{- if .Values.redis.existingSecret.name }}{{ .Values.redis.existingSecret.passwordKey }}{{ else }}redis-password{{ end }}
{{- end }}

{{/* Whether the chart renders its own Secret. */}}
{{- define "actloop.ownSecret" -}}
{{- if or (not .Values.nats.existingSecret.name) (not .Values.redis.existingSecret.name) }}true{{ end }}
{{- end }}

{{- define "actloop.natsServiceName" -}}
{{- printf "%s-nats" (include "actloop.fullname" .) }}
{{- end }}

{{- define "actloop.natsHeadlessName" -}}
{{- printf "%s-nats-headless" (include "actloop.fullname" .) }}
{{- end }}

{{- define "actloop.redisServiceName" -}}
{{- printf "%s-redis" (include "actloop.fullname" .) }}
{{- end }}

{{/* The URLs the services connect with, for the chart's Secret. */}}
{{- define "actloop.natsUrl" -}}
{{- if .Values.nats.bundled }}
{{- $auth := "" }}
{{- if .Values.nats.auth.enabled }}
{{- $auth = printf "%s:%s@" (.Values.nats.auth.user | urlquery) (.Values.nats.auth.password | urlquery) }}
{{- end }}
{{- printf "nats://%s%s.%s.svc.%s:4222" $auth (include "actloop.natsServiceName" .) .Release.Namespace .Values.clusterDomain }}
{{- else }}
{{- .Values.nats.url }}
{{- end }}
{{- end }}

{{- define "actloop.redisUrl" -}}
{{- if .Values.redis.bundled }}
{{- $auth := "" }}
{{- if .Values.redis.auth.enabled }}
{{- $auth = printf ":%s@" (.Values.redis.auth.password | urlquery) }}
{{- end }}
{{- printf "redis://%s%s.%s.svc.%s:6379/0" $auth (include "actloop.redisServiceName" .) .Release.Namespace .Values.clusterDomain }}
{{- else }}
{{- .Values.redis.url }}
{{- end }}
{{- end }}

{{/* ACTLOOP_STREAM_REPLICAS. */}}
{{- define "actloop.streamReplicas" -}}
{{- $n := int .Values.nats.streamReplicas }}
{{- if eq $n 0 }}{{ $n = ternary 3 1 .Values.nats.bundled }}{{ end }}
{{- $n }}
{{- end }}

{{/*
The gen-worker groups with defaults applied and checked, as JSON: a list
of {name, deployment, replica, url, api, model, slots, replicas, group}
(group: the values entry). Fails naming the group and the problem.
*/}}
{{- define "actloop.genWorkerGroups" -}}
{{- $gw := .Values.genWorker }}
{{- $groups := $gw.groups | default list }}
{{- if not $groups }}
{{- fail "actloop: genWorker.groups: at least one gen-worker group (one per inference replica) is required" }}
{{- end }}
{{- $names := dict }}
{{- $replicas := dict }}
{{- $out := list }}
{{- range $i, $g := $groups }}
{{- $at := printf "genWorker.groups[%d]" $i }}
{{- if not (kindIs "map" $g) }}
{{- fail (printf "actloop: %s: want a map with name, url, ... (got %v)" $at $g) }}
{{- end }}
{{- $name := required (printf "actloop: %s: name is required" $at) (get $g "name") | toString }}
{{- $at = printf "%s (%s)" $at $name }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "actloop: %s: name %q is not a DNS label (lower-case letters, digits, '-')" $at $name) }}
{{- end }}
{{- if hasKey $names $name }}
{{- fail (printf "actloop: %s: group name %q is used by two groups" $at $name) }}
{{- end }}
{{- $_ := set $names $name true }}
{{- $deployment := printf "%s-gen-worker-%s" (include "actloop.fullname" $) $name }}
{{- if gt (len $deployment) 63 }}
{{- fail (printf "actloop: %s: the Deployment name %q is longer than 63 characters; shorten the group name or fullnameOverride" $at $deployment) }}
{{- end }}
{{- $replica := get $g "replica" | default $name | toString }}
{{- if or (not (regexMatch "^[A-Za-z0-9_-]{1,64}$" $replica)) (eq $replica "start") }}
{{- fail (printf "actloop: %s: replica %q is not a valid replica name ([A-Za-z0-9_-], at most 64, not \"start\")" $at $replica) }}
{{- end }}
{{- if hasKey $replicas $replica }}
{{- fail (printf "actloop: %s: replica name %q is used by two groups (one group per inference replica)" $at $replica) }}
{{- end }}
{{- $_ := set $replicas $replica true }}
{{- $url := required (printf "actloop: %s: url is required (the replica's inference server, ACTLOOP_LLM_URL)" $at) (get $g "url") | toString }}
{{- if not (regexMatch "^https?://[^/]+" $url) }}
{{- fail (printf "actloop: %s: url %q: want http(s)://host[:port]" $at $url) }}
{{- end }}
{{- $api := get $g "api" | default $gw.api | toString }}
{{- if not (has $api (list "sglang" "openai")) }}
{{- fail (printf "actloop: %s: api %q: want sglang or openai" $at $api) }}
{{- end }}
{{- $slots := int (get $g "slots" | default $gw.slots) }}
{{- if lt $slots 1 }}
{{- fail (printf "actloop: %s: slots must be >= 1" $at) }}
{{- end }}
{{- $n := $gw.replicas }}
{{- if hasKey $g "replicas" }}{{ $n = $g.replicas }}{{ end }}
{{- if lt (int $n) 0 }}
{{- fail (printf "actloop: %s: replicas must be >= 0" $at) }}
{{- end }}
{{- $out = append $out (dict "name" $name "deployment" $deployment "replica" $replica "url" $url "api" $api
      "model" (get $g "model" | default $gw.model | toString) "slots" $slots "replicas" (int $n) "group" $g) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* Checks of the rest of the values; rendered by the coordinator's template. */}}
{{- define "actloop.validate" -}}
{{- $v := .Values }}
{{- if $v.nats.bundled }}
{{- $n := int $v.nats.replicas }}
{{- if or (lt $n 3) (eq (mod $n 2) 0) }}
{{- fail (printf "actloop: nats.replicas: %d: a bundled JetStream cluster needs an odd number of servers, at least 3" $n) }}
{{- end }}
{{- if gt (int (include "actloop.streamReplicas" .)) $n }}
{{- fail (printf "actloop: nats.streamReplicas: %s is more than the %d bundled servers" (include "actloop.streamReplicas" .) $n) }}
{{- end }}
{{- if not (regexMatch "^(always|[0-9]+(ms|s|m|h))$" (toString $v.nats.syncInterval)) }}
{{- fail (printf "actloop: nats.syncInterval: %q: want always or a duration such as 1s" (toString $v.nats.syncInterval)) }}
{{- end }}
{{- if and $v.nats.auth.enabled (not $v.nats.existingSecret.name) (not $v.nats.auth.password) }}
{{- fail "actloop: nats.auth.password is required with nats.auth.enabled (or name a Secret in nats.existingSecret.name)" }}
{{- end }}
{{- else if not $v.nats.existingSecret.name }}
{{- if not $v.nats.url }}
{{- fail "actloop: nats.url is required when nats.bundled is false (or name a Secret in nats.existingSecret.name)" }}
{{- end }}
{{- if not (regexMatch "^(nats|tls|wss?)://" $v.nats.url) }}
{{- fail (printf "actloop: nats.url: want nats://[user:password@]host:port") }}
{{- end }}
{{- end }}
{{- $sr := int (include "actloop.streamReplicas" .) }}
{{- if or (lt $sr 1) (gt $sr 5) }}
{{- fail (printf "actloop: nats.streamReplicas: %d: JetStream replicas are 1 to 5" $sr) }}
{{- end }}
{{- if $v.redis.bundled }}
{{- if not (has $v.redis.appendfsync (list "always" "everysec" "no")) }}
{{- fail (printf "actloop: redis.appendfsync: %q: want always, everysec or no" $v.redis.appendfsync) }}
{{- end }}
{{- if and $v.redis.auth.enabled (not $v.redis.existingSecret.name) (not $v.redis.auth.password) }}
{{- fail "actloop: redis.auth.password is required with redis.auth.enabled (or name a Secret in redis.existingSecret.name)" }}
{{- end }}
{{- else if not $v.redis.existingSecret.name }}
{{- if not $v.redis.url }}
{{- fail "actloop: redis.url is required when redis.bundled is false (or name a Secret in redis.existingSecret.name)" }}
{{- end }}
{{- if not (regexMatch "^(redis|rediss|unix)://" $v.redis.url) }}
{{- fail "actloop: redis.url: want redis://[:password@]host:port/db" }}
{{- end }}
{{- end }}
{{- if not (has $v.coordinator.policy (list "fcfs" "lpt" "sjf")) }}
{{- fail (printf "actloop: coordinator.policy: %q: want fcfs, lpt or sjf" $v.coordinator.policy) }}
{{- end }}
{{- if not (has $v.envWorker.sandbox.isolation (list "auto" "bwrap" "none")) }}
{{- fail (printf "actloop: envWorker.sandbox.isolation: %q: want auto, bwrap or none" $v.envWorker.sandbox.isolation) }}
{{- end }}
{{- if not (has $v.predictorGw.backend (list "history" "http")) }}
{{- fail (printf "actloop: predictorGw.backend: %q: want history or http" $v.predictorGw.backend) }}
{{- end }}
{{- if and (eq $v.predictorGw.backend "http") (not $v.predictorGw.url) }}
{{- fail "actloop: predictorGw.url is required with predictorGw.backend http" }}
{{- end }}
{{- if and $v.envWorker.keda.enabled (not $v.nats.bundled) (not $v.envWorker.keda.monitoringEndpoint) }}
{{- fail "actloop: envWorker.keda.monitoringEndpoint (host:port of the NATS monitoring endpoint) is required with an external NATS" }}
{{- end }}
{{- if and $v.envWorker.autoscaling.enabled (gt (int $v.envWorker.autoscaling.minReplicas) (int $v.envWorker.autoscaling.maxReplicas)) }}
{{- fail "actloop: envWorker.autoscaling.minReplicas is more than maxReplicas" }}
{{- end }}
{{- if lt (int $v.terminationGraceMarginSeconds) 20 }}
{{- fail "actloop: terminationGraceMarginSeconds: at least 20 (after the shutdown timeout, flushing and draining NATS and stopping HTTP take up to 20 s)" }}
{{- end }}
{{- range $c := list "coordinator" "genWorker" "envWorker" "predictorGw" }}
{{- range $e := (index $v $c).extraEnv | default list }}
{{- if not (and (kindIs "map" $e) (get $e "name")) }}
{{- fail (printf "actloop: %s.extraEnv: %v: each entry needs a name (a Kubernetes EnvVar)" $c $e) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* A component's shutdown timeout in seconds: (dict "ctx" $ "c" .Values.coordinator). */}}
{{- define "actloop.shutdownSeconds" -}}
{{- $s := int .c.shutdownTimeoutSeconds }}
{{- if le $s 0 }}{{ $s = int .ctx.Values.shutdownTimeoutSeconds }}{{ end }}
{{- $s }}
{{- end }}

{{/*
Environment of every actloop container:
(dict "ctx" $ "c" .Values.coordinator "addr" "ACTLOOP_COORDINATOR_ADDR").
*/}}
{{- define "actloop.commonEnv" -}}
- name: ACTLOOP_NATS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "actloop.natsSecretName" .ctx }}
      key: {{ include "actloop.natsUrlKey" .ctx }}
- name: ACTLOOP_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "actloop.redisSecretName" .ctx }}
      key: {{ include "actloop.redisUrlKey" .ctx }}
- name: ACTLOOP_STREAM_REPLICAS
  value: {{ include "actloop.streamReplicas" .ctx | quote }}
- name: ACTLOOP_SHUTDOWN_TIMEOUT
  value: {{ printf "%ss" (include "actloop.shutdownSeconds" .) | quote }}
- name: ACTLOOP_LOG_LEVEL
  value: {{ .ctx.Values.logLevel | quote }}
- name: {{ .addr }}
  value: {{ printf ":%d" (int .c.port) | quote }}
{{- end }}

{{/* The pod's name, for ids that must be unique per pod. */}}
{{- define "actloop.podNameEnv" -}}
- name: {{ . }}
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}

{{/* Probes on the container's port named http. */}}
{{- define "actloop.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 5
  failureThreshold: 60
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 2
{{- end }}

{{/* Pod annotations: (dict "ctx" $ "c" .Values.coordinator ["agentConfig" true]). */}}
{{- define "actloop.podAnnotations" -}}
{{- if include "actloop.ownSecret" .ctx }}
checksum/secret: {{ include (print .ctx.Template.BasePath "/secret.yaml") .ctx | sha256sum }}
{{- end }}
{{- if and (get . "agentConfig") .ctx.Values.agentConfig }}
checksum/agent-config: {{ .ctx.Values.agentConfig | sha256sum }}
{{- end }}
{{- with .c.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Agent configuration: mount and variable (gen-worker, env-worker). */}}
{{- define "actloop.agentConfigPath" -}}
/etc/actloop/agent/agent.yaml
{{- end }}

{{/* The scheduling fields of a pod: (dict "ctx" $ "c" <component values> ["o" <overrides>]). */}}
{{- define "actloop.scheduling" -}}
{{- $o := get . "o" | default dict }}
{{- with (get $o "nodeSelector" | default .c.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (get $o "tolerations" | default .c.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (get $o "affinity" | default .c.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A PodDisruptionBudget: (dict "ctx" $ "name" "..." "component" "..." ["group" "..."] "pdb" <pdb values> "policy" "AlwaysAllow"). */}}
{{- define "actloop.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "actloop.labels" . | nindent 4 }}
spec:
  {{- if hasKey .pdb "minAvailable" }}
  minAvailable: {{ .pdb.minAvailable }}
  {{- else if hasKey .pdb "maxUnavailable" }}
  maxUnavailable: {{ .pdb.maxUnavailable }}
  {{- else }}
  maxUnavailable: 1
  {{- end }}
  {{- with get . "policy" }}
  unhealthyPodEvictionPolicy: {{ . }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "actloop.selectorLabels" . | nindent 6 }}
{{- end }}

{{/*
The pod spec of an actloop service:
(dict "ctx" $ "c" <component values> "service" "coordinator" "image" <image values>
      "env" <extra env YAML> "mounts" <extra volumeMounts YAML> "volumes" <extra volumes YAML>
      ["o" <group overrides>] ["podSecurityContext" ...] ["containerSecurityContext" ...]
      ["hostUsers" false]).
*/}}
{{- define "actloop.podSpec" -}}
{{- $ctx := .ctx }}
{{- $c := .c }}
{{- $o := get . "o" | default dict }}
{{- $shutdown := int (include "actloop.shutdownSeconds" .) -}}
serviceAccountName: {{ include "actloop.serviceAccountName" $ctx }}
automountServiceAccountToken: false
terminationGracePeriodSeconds: {{ add $shutdown (int $ctx.Values.terminationGraceMarginSeconds) }}
{{- if hasKey . "hostUsers" }}
hostUsers: {{ .hostUsers }}
{{- end }}
securityContext:
  {{- toYaml (get . "podSecurityContext" | default $ctx.Values.podSecurityContext) | nindent 2 }}
{{- include "actloop.scheduling" . }}
containers:
  - name: {{ .service }}
    image: {{ include "actloop.image" (dict "ctx" $ctx "image" .image) }}
    imagePullPolicy: {{ .image.pullPolicy }}
    args: ["serve", {{ .service | quote }}]
    ports:
      - name: http
        containerPort: {{ int $c.port }}
        protocol: TCP
    env:
      {{- include "actloop.commonEnv" (dict "ctx" $ctx "c" $c "addr" .addr) | nindent 6 }}
      {{- with get . "env" }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with $ctx.Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- with $c.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- with get $o "extraEnv" }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- include "actloop.probes" . | nindent 4 }}
    resources:
      {{- toYaml (get $o "resources" | default $c.resources) | nindent 6 }}
    securityContext:
      {{- toYaml (get . "containerSecurityContext" | default $ctx.Values.containerSecurityContext) | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      {{- if and (get . "agentConfig") $ctx.Values.agentConfig }}
      - name: agent-config
        mountPath: {{ include "actloop.agentConfigPath" . | dir }}
        readOnly: true
      {{- end }}
      {{- with get . "mounts" }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with $c.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
volumes:
  - name: tmp
    emptyDir: {}
  {{- if and (get . "agentConfig") $ctx.Values.agentConfig }}
  - name: agent-config
    configMap:
      name: {{ include "actloop.fullname" $ctx }}-agent
  {{- end }}
  {{- with get . "volumes" }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- with $c.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The agent configuration's variable, for workers. */}}
{{- define "actloop.agentConfigEnv" -}}
{{- if .Values.agentConfig }}
- name: ACTLOOP_AGENT_CONFIG
  value: {{ include "actloop.agentConfigPath" . | quote }}
{{- end }}
{{- end }}

{{/* The coordinator's own settings: (dict "ctx" $ "replicas" <replica names>). */}}
{{- define "actloop.coordinatorEnv" -}}
{{- $c := .ctx.Values.coordinator }}
{{- include "actloop.podNameEnv" "ACTLOOP_COORDINATOR_ID" }}
- name: ACTLOOP_REPLICAS
  value: {{ join "," .replicas | quote }}
- name: ACTLOOP_SLOTS
  value: {{ (int $c.slots) | default (int .ctx.Values.genWorker.slots) | toString | quote }}
- name: ACTLOOP_POLICY
  value: {{ $c.policy | quote }}
- name: ACTLOOP_LEADER_LEASE
  value: {{ $c.leaderLease | quote }}
{{- end }}

{{/* A gen-worker group's own settings: (dict "ctx" $ "g" <group>). */}}
{{- define "actloop.genWorkerEnv" -}}
{{- include "actloop.podNameEnv" "ACTLOOP_WORKER_ID" }}
- name: ACTLOOP_REPLICA
  value: {{ .g.replica | quote }}
- name: ACTLOOP_LLM_URL
  value: {{ .g.url | quote }}
- name: ACTLOOP_LLM_API
  value: {{ .g.api | quote }}
{{- with .g.model }}
- name: ACTLOOP_LLM_MODEL
  value: {{ . | quote }}
{{- end }}
- name: ACTLOOP_SLOTS
  value: {{ .g.slots | toString | quote }}
- name: ACTLOOP_TOKENIZER
  value: {{ .ctx.Values.model.tokenizer | quote }}
- name: ACTLOOP_CHAT_TEMPLATE
  value: {{ .ctx.Values.model.chatTemplate | quote }}
{{- include "actloop.agentConfigEnv" .ctx }}
{{- end }}

{{/* The env-worker's own settings. */}}
{{- define "actloop.envWorkerEnv" -}}
{{- $c := .Values.envWorker }}
{{- include "actloop.podNameEnv" "ACTLOOP_ENV_WORKER_ID" }}
- name: ACTLOOP_ENV_SLOTS
  value: {{ int $c.slots | toString | quote }}
- name: ACTLOOP_SANDBOX_ROOT
  value: {{ $c.sandbox.root | quote }}
- name: ACTLOOP_SANDBOX_ISOLATION
  value: {{ $c.sandbox.isolation | quote }}
- name: ACTLOOP_TOKENIZER
  value: {{ .Values.model.tokenizer | quote }}
- name: ACTLOOP_CHAT_TEMPLATE
  value: {{ .Values.model.chatTemplate | quote }}
{{- include "actloop.agentConfigEnv" . }}
{{- end }}

{{/* The env-worker's sandbox volume: (.Values.envWorker.sandbox). */}}
{{- define "actloop.sandboxVolume" -}}
- name: sandboxes
  emptyDir:
    {{- with .sizeLimit }}
    sizeLimit: {{ . }}
    {{- else }}
    {}
    {{- end }}
{{- end }}

{{/* predictor-gw's own settings. */}}
{{- define "actloop.predictorEnv" -}}
{{- $c := .Values.predictorGw -}}
- name: ACTLOOP_PREDICTOR
  value: {{ $c.backend | quote }}
{{- with $c.url }}
- name: ACTLOOP_PREDICTOR_URL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* A PVC spec: (persistence values). */}}
{{- define "actloop.pvcSpec" -}}
accessModes:
  {{- toYaml .accessModes | nindent 2 }}
{{- if eq (toString .storageClass) "-" }}
storageClassName: ""
{{- else if .storageClass }}
storageClassName: {{ .storageClass | quote }}
{{- end }}
resources:
  requests:
    storage: {{ .size | quote }}
{{- end }}

{{/* The bundled NATS servers' configuration. */}}
{{- define "actloop.natsConf" -}}
{{- $n := .Values.nats }}
{{- $headless := include "actloop.natsHeadlessName" . }}
{{- $sts := include "actloop.natsServiceName" . -}}
# server_name and NATS_PASSWORD come from the environment.
server_name: $POD_NAME
port: 4222
http_port: 8222
pid_file: /var/run/nats/nats.pid
lame_duck_duration: {{ $n.lameDuckDuration }}
lame_duck_grace_period: 10s
jetstream {
  store_dir: /data
  # How often the file store fsyncs (JetStream's default: 2m). As
  # deploy/nats.conf.
  sync_interval: {{ $n.syncInterval }}
}
cluster {
  name: {{ $sts }}
  port: 6222
  routes: [
    {{- range $i, $_ := until (int $n.replicas) }}
    nats://{{ $sts }}-{{ $i }}.{{ $headless }}.{{ $.Release.Namespace }}.svc.{{ $.Values.clusterDomain }}:6222
    {{- end }}
  ]
}
{{- if $n.auth.enabled }}
authorization {
  user: {{ $n.auth.user | quote }}
  password: $NATS_PASSWORD
}
{{- end }}
{{- end }}
