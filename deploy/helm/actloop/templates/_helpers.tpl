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

{{/*
Fills in the bundled servers' passwords left empty (nats.auth.password,
nats.auth.servicePasswordSeed, redis.auth.password): the ones the chart's
Secret already holds, so an upgrade keeps them, else new random ones.
Called wherever they are read; it sets each once.
*/}}
{{- define "actloop.ensureSecrets" -}}
{{- $v := .Values }}
{{- $old := dict }}
{{- with lookup "v1" "Secret" .Release.Namespace (include "actloop.secretName" .) }}
{{- $old = .data | default dict }}
{{- end }}
{{- if and $v.nats.bundled $v.nats.auth.enabled (not $v.nats.existingSecret.name) }}
{{- if not $v.nats.auth.password }}
{{- $_ := set $v.nats.auth "password" (include "actloop.keptOrNew" (dict "old" $old "key" "nats-password")) }}
{{- end }}
{{- if not $v.nats.auth.servicePasswordSeed }}
{{- $_ := set $v.nats.auth "servicePasswordSeed" (include "actloop.keptOrNew" (dict "old" $old "key" "nats-password-seed")) }}
{{- $_ := set $v.nats.auth "generatedSeed" true }}
{{- end }}
{{- end }}
{{- if and $v.redis.bundled $v.redis.auth.enabled (not $v.redis.existingSecret.name) (not $v.redis.auth.password) }}
{{- $_ := set $v.redis.auth "password" (include "actloop.keptOrNew" (dict "old" $old "key" "redis-password")) }}
{{- end }}
{{- end }}

{{/* The Secret's value of key (base64) when it has one, else a new random one. */}}
{{- define "actloop.keptOrNew" -}}
{{- with get .old .key }}{{ b64dec . }}{{ else }}{{ printf "p%s" (randAlphaNum 31) }}{{ end }}
{{- end }}

{{/* The URLs the services connect with, for the chart's Secret. */}}
{{- define "actloop.natsUrl" -}}
{{- include "actloop.ensureSecrets" . }}
{{- if .Values.nats.bundled }}
{{- $auth := "" }}
{{- /* One user for everything: in the URL. Per service: in ACTLOOP_NATS_USER/PASSWORD. */}}
{{- if and .Values.nats.auth.enabled (not .Values.nats.auth.perService) }}
{{- $auth = printf "%s:%s@" (.Values.nats.auth.user | urlquery) (.Values.nats.auth.password | urlquery) }}
{{- end }}
{{- $scheme := ternary "tls" "nats" (eq (include "actloop.serverTLS" (dict "ctx" . "s" "nats")) "true") }}
{{- printf "%s://%s%s.%s.svc.%s:4222" $scheme $auth (include "actloop.natsServiceName" .) .Release.Namespace .Values.clusterDomain }}
{{- else }}
{{- .Values.nats.url }}
{{- end }}
{{- end }}

{{- define "actloop.redisUrl" -}}
{{- include "actloop.ensureSecrets" . }}
{{- if .Values.redis.bundled }}
{{- $auth := "" }}
{{- /* One password for everything: in the URL. Per service: in ACTLOOP_REDIS_USERNAME/PASSWORD. */}}
{{- if and .Values.redis.auth.enabled (not .Values.redis.auth.perService) }}
{{- $auth = printf ":%s@" (.Values.redis.auth.password | urlquery) }}
{{- end }}
{{- $scheme := ternary "rediss" "redis" (eq (include "actloop.serverTLS" (dict "ctx" . "s" "redis")) "true") }}
{{- printf "%s://%s%s.%s.svc.%s:6379/0" $scheme $auth (include "actloop.redisServiceName" .) .Release.Namespace .Values.clusterDomain }}
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
NATS and Redis credentials and TLS.

Files come from Secrets of the user's, mounted read-only through one
projected volume per server. Not under /etc: the env-worker's bwrap
sandboxes see /etc (read-only), so the model's commands could read them.
*/}}
{{- define "actloop.natsSecretsDir" -}}
/var/run/secrets/actloop/nats
{{- end }}

{{- define "actloop.redisSecretsDir" -}}
/var/run/secrets/actloop/redis
{{- end }}

{{/*
The NATS permissions of docs/security.md's table, by client: what the
bundled servers grant each user when nats.auth.perService is on (pub,
sub, pubDeny: publish's deny, responses: allow_responses). <replica>
is a gen-worker group's replica; <id> an env-worker's id, which is its pod
name, unknown here: `*` (and its consumer, env-<id>, `*`).
*/}}
{{- define "actloop.natsPermissions" -}}
{
  "base": {"pub": ["$JS.API.INFO", "$JS.API.STREAM.INFO.ACTLOOP_SAMPLES", "$JS.API.STREAM.CREATE.ACTLOOP_SAMPLES", "$JS.API.STREAM.UPDATE.ACTLOOP_SAMPLES", "$JS.API.STREAM.INFO.ACTLOOP_EVENTS", "$JS.API.STREAM.CREATE.ACTLOOP_EVENTS", "$JS.API.STREAM.UPDATE.ACTLOOP_EVENTS", "$JS.API.STREAM.INFO.ACTLOOP_GEN", "$JS.API.STREAM.CREATE.ACTLOOP_GEN", "$JS.API.STREAM.UPDATE.ACTLOOP_GEN", "$JS.API.STREAM.INFO.ACTLOOP_ENV", "$JS.API.STREAM.CREATE.ACTLOOP_ENV", "$JS.API.STREAM.UPDATE.ACTLOOP_ENV", "$JS.API.STREAM.INFO.ACTLOOP_RESULTS", "$JS.API.STREAM.CREATE.ACTLOOP_RESULTS", "$JS.API.STREAM.UPDATE.ACTLOOP_RESULTS", "$JS.API.STREAM.INFO.ACTLOOP_DLQ", "$JS.API.STREAM.CREATE.ACTLOOP_DLQ", "$JS.API.STREAM.UPDATE.ACTLOOP_DLQ", "$JS.API.STREAM.INFO.KV_actloop_priority", "$JS.API.STREAM.CREATE.KV_actloop_priority", "$JS.API.STREAM.UPDATE.KV_actloop_priority", "$JS.API.STREAM.INFO.KV_actloop_heartbeats", "$JS.API.STREAM.CREATE.KV_actloop_heartbeats", "$JS.API.STREAM.UPDATE.KV_actloop_heartbeats", "$JS.API.STREAM.INFO.KV_actloop_control", "$JS.API.STREAM.CREATE.KV_actloop_control", "$JS.API.STREAM.UPDATE.KV_actloop_control", "$JS.API.STREAM.INFO.KV_actloop_admitted", "$JS.API.STREAM.CREATE.KV_actloop_admitted", "$JS.API.STREAM.UPDATE.KV_actloop_admitted", "$JS.API.STREAM.INFO.OBJ_ACTLOOP_RESULT_BODIES", "$JS.API.STREAM.CREATE.OBJ_ACTLOOP_RESULT_BODIES", "$JS.API.STREAM.UPDATE.OBJ_ACTLOOP_RESULT_BODIES", "$JS.FC.>", "actloop.dlq"],
    "sub": ["_INBOX.>"]},
  "coordinator": {"pub": ["$JS.API.CONSUMER.CREATE.ACTLOOP_SAMPLES.coordinator-samples.actloop.samples", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_SAMPLES.coordinator-samples", "$JS.ACK.ACTLOOP_SAMPLES.coordinator-samples.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_EVENTS.coordinator-events.actloop.events", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_EVENTS.coordinator-events", "$JS.ACK.ACTLOOP_EVENTS.coordinator-events.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_EVENTS.coordinator-predictions.actloop.predictions", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_EVENTS.coordinator-predictions", "$JS.ACK.ACTLOOP_EVENTS.coordinator-predictions.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.coordinator-results.actloop.results.>", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.coordinator-results", "$JS.ACK.ACTLOOP_RESULTS.coordinator-results.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.*.actloop.results.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.*.actloop.groups.>", "$JS.API.CONSUMER.INFO.ACTLOOP_SAMPLES.coordinator-samples", "$JS.API.CONSUMER.LIST.ACTLOOP_SAMPLES", "$JS.API.CONSUMER.LIST.ACTLOOP_GEN", "$JS.API.CONSUMER.LIST.ACTLOOP_ENV", "$JS.API.STREAM.MSG.GET.ACTLOOP_SAMPLES", "$JS.API.STREAM.MSG.GET.ACTLOOP_GEN", "$JS.API.STREAM.MSG.GET.ACTLOOP_ENV", "$JS.API.STREAM.INFO.KV_actloop_leader", "$JS.API.STREAM.CREATE.KV_actloop_leader", "$JS.API.STREAM.UPDATE.KV_actloop_leader", "$JS.API.DIRECT.GET.KV_actloop_leader.$KV.actloop_leader.coordinator", "$JS.API.CONSUMER.CREATE.KV_actloop_leader.*.$KV.actloop_leader.coordinator", "$JS.API.CONSUMER.DELETE.KV_actloop_leader.*", "$JS.API.DIRECT.GET.KV_actloop_control.$KV.actloop_control.>", "$JS.API.CONSUMER.CREATE.KV_actloop_control.*.$KV.actloop_control.>", "$JS.API.CONSUMER.DELETE.KV_actloop_control.*", "$JS.API.DIRECT.GET.KV_actloop_heartbeats.$KV.actloop_heartbeats.>", "$JS.API.CONSUMER.CREATE.KV_actloop_heartbeats.*.$KV.actloop_heartbeats.>", "$JS.API.CONSUMER.DELETE.KV_actloop_heartbeats.*", "$JS.API.DIRECT.GET.KV_actloop_priority.$KV.actloop_priority.>", "$JS.API.CONSUMER.CREATE.KV_actloop_priority.*.$KV.actloop_priority.>", "$JS.API.CONSUMER.DELETE.KV_actloop_priority.*", "$JS.API.DIRECT.GET.KV_actloop_admitted.$KV.actloop_admitted.>", "$JS.API.CONSUMER.CREATE.KV_actloop_admitted.*.$KV.actloop_admitted.>", "$JS.API.CONSUMER.DELETE.KV_actloop_admitted.*", "$O.ACTLOOP_RESULT_BODIES.>", "$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES.$O.ACTLOOP_RESULT_BODIES.M.>", "$JS.API.STREAM.PURGE.OBJ_ACTLOOP_RESULT_BODIES", "actloop.env.>", "actloop.gen.>", "actloop.results.>", "actloop.groups.>", "actloop.predict", "actloop.events", "actloop.cancel", "$KV.actloop_priority.>", "$KV.actloop_control.state", "$KV.actloop_leader.coordinator", "$KV.actloop_admitted.>"],
    "sub": ["actloop.control.*", "actloop.consumers.create"], "responses": true},
  "gen-worker": {"pub": ["$JS.API.CONSUMER.CREATE.ACTLOOP_GEN.gen-<replica>-hi.actloop.gen.<replica>.hi", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_GEN.gen-<replica>-hi", "$JS.ACK.ACTLOOP_GEN.gen-<replica>-hi.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_GEN.gen-<replica>-rhi.actloop.gen.<replica>.rhi", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_GEN.gen-<replica>-rhi", "$JS.ACK.ACTLOOP_GEN.gen-<replica>-rhi.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_GEN.gen-<replica>-rlo.actloop.gen.<replica>.rlo", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_GEN.gen-<replica>-rlo", "$JS.ACK.ACTLOOP_GEN.gen-<replica>-rlo.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_GEN.*.actloop.gen.*.lo", "$JS.API.CONSUMER.INFO.ACTLOOP_GEN.*", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_GEN.*", "$JS.API.STREAM.MSG.GET.ACTLOOP_GEN", "$JS.API.DIRECT.GET.KV_actloop_control.$KV.actloop_control.state", "$JS.API.CONSUMER.CREATE.KV_actloop_control.*.$KV.actloop_control.state", "$JS.API.CONSUMER.DELETE.KV_actloop_control.*", "$JS.API.DIRECT.GET.KV_actloop_priority.$KV.actloop_priority.>", "$JS.API.CONSUMER.CREATE.KV_actloop_priority.*.$KV.actloop_priority.>", "$JS.API.CONSUMER.DELETE.KV_actloop_priority.*", "$JS.API.DIRECT.GET.KV_actloop_heartbeats.$KV.actloop_heartbeats.>", "$JS.API.CONSUMER.CREATE.KV_actloop_heartbeats.*.$KV.actloop_heartbeats.>", "$JS.API.CONSUMER.DELETE.KV_actloop_heartbeats.*", "actloop.gen.>", "actloop.env.>", "actloop.events", "actloop.predictions", "actloop.predict", "$JS.ACK.ACTLOOP_GEN.>", "$KV.actloop_heartbeats.gen.<replica>.>", "$KV.actloop_control.gen.<replica>.>"],
    "sub": ["actloop.gen.<replica>.*", "actloop.cancel"]},
  "env-worker": {"pub": ["$JS.API.CONSUMER.CREATE.ACTLOOP_ENV.env-<id>.actloop.env.<id>", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_ENV.env-<id>", "$JS.ACK.ACTLOOP_ENV.env-<id>.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_ENV.env-start.actloop.env.start", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_ENV.env-start", "$JS.ACK.ACTLOOP_ENV.env-start.>", "$JS.API.DIRECT.GET.KV_actloop_control.$KV.actloop_control.state", "$JS.API.CONSUMER.CREATE.KV_actloop_control.*.$KV.actloop_control.state", "$JS.API.CONSUMER.DELETE.KV_actloop_control.*", "$JS.API.DIRECT.GET.KV_actloop_priority.$KV.actloop_priority.>", "$JS.API.CONSUMER.CREATE.KV_actloop_priority.*.$KV.actloop_priority.>", "$JS.API.CONSUMER.DELETE.KV_actloop_priority.*", "$O.ACTLOOP_RESULT_BODIES.>", "$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES.$O.ACTLOOP_RESULT_BODIES.M.>", "$JS.API.STREAM.PURGE.OBJ_ACTLOOP_RESULT_BODIES", "actloop.gen.>", "actloop.env.>", "actloop.results.>", "actloop.events", "actloop.predictions", "$KV.actloop_heartbeats.env.<id>"],
    "sub": ["actloop.env.<id>", "actloop.env.start"]},
  "predictor-gw": {"pub": ["$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.predictor-history.actloop.results.>", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.predictor-history", "$JS.ACK.ACTLOOP_RESULTS.predictor-history.>"],
    "sub": ["actloop.predict"], "responses": true},
  "cli": {"pub": ["$JS.API.STREAM.INFO.ACTLOOP_SAMPLES", "$JS.API.STREAM.CREATE.ACTLOOP_SAMPLES", "$JS.API.STREAM.INFO.ACTLOOP_EVENTS", "$JS.API.STREAM.CREATE.ACTLOOP_EVENTS", "$JS.API.STREAM.INFO.ACTLOOP_GEN", "$JS.API.STREAM.CREATE.ACTLOOP_GEN", "$JS.API.STREAM.INFO.ACTLOOP_ENV", "$JS.API.STREAM.CREATE.ACTLOOP_ENV", "$JS.API.STREAM.INFO.ACTLOOP_RESULTS", "$JS.API.STREAM.CREATE.ACTLOOP_RESULTS", "$JS.API.STREAM.INFO.ACTLOOP_DLQ", "$JS.API.STREAM.CREATE.ACTLOOP_DLQ", "actloop.consumers.create", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.*", "$JS.API.CONSUMER.INFO.ACTLOOP_RESULTS.*", "$JS.API.STREAM.INFO.OBJ_ACTLOOP_RESULT_BODIES", "$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES.$O.ACTLOOP_RESULT_BODIES.M.>", "$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES", "$JS.FC.>", "actloop.samples", "actloop.control.*", "$JS.ACK.ACTLOOP_RESULTS.>"],
    "sub": ["_INBOX.>"],
    "pubDeny": ["$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.coordinator-results.>", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.coordinator-results", "$JS.API.CONSUMER.INFO.ACTLOOP_RESULTS.coordinator-results", "$JS.ACK.ACTLOOP_RESULTS.coordinator-results.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.predictor-history.>", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.predictor-history", "$JS.API.CONSUMER.INFO.ACTLOOP_RESULTS.predictor-history", "$JS.ACK.ACTLOOP_RESULTS.predictor-history.>"]},
  "gateway": {"pub": ["$JS.API.STREAM.INFO.ACTLOOP_SAMPLES", "$JS.API.STREAM.CREATE.ACTLOOP_SAMPLES", "$JS.API.STREAM.INFO.ACTLOOP_EVENTS", "$JS.API.STREAM.CREATE.ACTLOOP_EVENTS", "$JS.API.STREAM.INFO.ACTLOOP_GEN", "$JS.API.STREAM.CREATE.ACTLOOP_GEN", "$JS.API.STREAM.INFO.ACTLOOP_ENV", "$JS.API.STREAM.CREATE.ACTLOOP_ENV", "$JS.API.STREAM.INFO.ACTLOOP_RESULTS", "$JS.API.STREAM.CREATE.ACTLOOP_RESULTS", "$JS.API.STREAM.INFO.ACTLOOP_DLQ", "$JS.API.STREAM.CREATE.ACTLOOP_DLQ", "actloop.consumers.create", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.*", "$JS.API.CONSUMER.INFO.ACTLOOP_RESULTS.*", "$JS.API.STREAM.INFO.OBJ_ACTLOOP_RESULT_BODIES", "$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES.$O.ACTLOOP_RESULT_BODIES.M.>", "$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES", "$JS.FC.>", "actloop.samples", "actloop.control.*", "$JS.ACK.ACTLOOP_RESULTS.>"],
    "sub": ["_INBOX.>"],
    "pubDeny": ["$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.coordinator-results.>", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.coordinator-results", "$JS.API.CONSUMER.INFO.ACTLOOP_RESULTS.coordinator-results", "$JS.ACK.ACTLOOP_RESULTS.coordinator-results.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.predictor-history.>", "$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.predictor-history", "$JS.API.CONSUMER.INFO.ACTLOOP_RESULTS.predictor-history", "$JS.ACK.ACTLOOP_RESULTS.predictor-history.>"]}
}
{{- end }}

{{- define "actloop.natsPerService" -}}
{{- $a := .Values.nats.auth }}
{{- if and .Values.nats.bundled $a.enabled $a.perService }}true{{ end }}
{{- end }}

{{/*
The bundled NATS users of the services when nats.auth.perService is on, as
JSON: a list of {user, role, replica, env (the password's variable in the
NATS pods), key (the password's key in the NATS Secret)}. The CLI's user
(nats.auth.user) is not in it.
*/}}
{{- define "actloop.natsServiceUsers" -}}
{{- $key := include "actloop.natsPasswordKey" . }}
{{- $users := list }}
{{- range $u := list (list "coordinator" "COORDINATOR") (list "predictor-gw" "PREDICTOR_GW") (list "env-worker" "ENV_WORKER") }}
{{- $users = append $users (dict "user" (index $u 0) "role" (index $u 0) "replica" "" "env" (printf "NATS_PASSWORD_%s" (index $u 1))
      "key" (printf "%s-%s" $key (index $u 0))) }}
{{- end }}
{{- if .Values.gateway.enabled }}
{{- $users = append $users (dict "user" "gateway" "role" "gateway" "replica" "" "env" "NATS_PASSWORD_GATEWAY" "key" (printf "%s-gateway" $key)) }}
{{- end }}
{{- range $i, $g := include "actloop.genWorkerGroups" . | fromJsonArray }}
{{- $user := printf "gen-worker-%s" $g.replica }}
{{- $users = append $users (dict "user" $user "role" "gen-worker" "replica" $g.replica "env" (printf "NATS_PASSWORD_GEN_WORKER_%d" $i)
      "key" (printf "%s-%s" $key $user)) }}
{{- end }}
{{- toJson $users }}
{{- end }}

{{/* A service user's password in the chart's Secret: (dict "ctx" $ "user" "coordinator"). */}}
{{- define "actloop.natsServicePassword" -}}
{{- include "actloop.ensureSecrets" .ctx }}
{{- printf "%s\n%s" .ctx.Values.nats.auth.servicePasswordSeed .user | sha256sum | printf "p%s" }}
{{- end }}

{{/*
The bundled Redis's ACL users of the services (docs/security.md's Redis
users; service.RedisRules, which deploy/helm_test.go holds this to): each
user's rules after "on" and its password.
*/}}
{{- define "actloop.redisUsers" -}}
{
  "coordinator": ["resetkeys", "~actloop:traj:*", "~actloop:{coordinator}:*", "~actloop:{group:*", "resetchannels", "-@all", "+@connection", "+@transaction", "+evalsha", "+eval", "+evalsha_ro", "+eval_ro", "+script|load", "+script|exists", "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+readonly", "+readwrite", "+@read", "+@write", "-@dangerous"],
  "gen-worker": ["resetkeys", "~actloop:traj:*", "resetchannels", "-@all", "+@connection", "+@transaction", "+evalsha", "+eval", "+evalsha_ro", "+eval_ro", "+script|load", "+script|exists", "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+readonly", "+readwrite", "+@read", "+@write", "-@dangerous"],
  "env-worker": ["resetkeys", "~actloop:traj:*", "resetchannels", "-@all", "+@connection", "+@transaction", "+evalsha", "+eval", "+evalsha_ro", "+eval_ro", "+script|load", "+script|exists", "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+readonly", "+readwrite", "+@read", "+@write", "-@dangerous"],
  "predictor-gw": ["resetkeys", "~actloop:{predict}:*", "%R~actloop:traj:*", "resetchannels", "-@all", "+@connection", "+@transaction", "+evalsha", "+eval", "+evalsha_ro", "+eval_ro", "+script|load", "+script|exists", "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+readonly", "+readwrite", "+@read", "+@write", "-@dangerous"]
}
{{- end }}

{{- define "actloop.redisPerService" -}}
{{- $a := .Values.redis.auth }}
{{- if and .Values.redis.bundled $a.enabled $a.perService }}true{{ end }}
{{- end }}

{{/*
A service's Redis password: (dict "ctx" $ "user" "coordinator"), derived
from the default user's (redis.auth.password), which it does not reveal.
*/}}
{{- define "actloop.redisServicePassword" -}}
{{- include "actloop.ensureSecrets" .ctx }}
{{- printf "%s\n%s" .ctx.Values.redis.auth.password .user | sha256sum | printf "p%s" }}
{{- end }}

{{/* A list of subjects in nats.conf syntax, placeholders replaced: (dict "s" <list> "replica" "r0"). */}}
{{- define "actloop.natsSubjects" -}}
{{- $out := list }}
{{- range .s }}
{{- $out = append $out (. | replace "<replica>" $.replica | replace "env-<id>" "*" | replace "<id>" "*" | quote) }}
{{- end }}
{{- printf "[%s]" (join ", " $out) }}
{{- end }}

{{/* One user of the bundled server's authorization: (dict "user" "..." "env" "..." "perms" <rows> "replica" "..."). */}}
{{- define "actloop.natsConfUser" -}}
{{- $pub := list }}
{{- $pubDeny := list }}
{{- $sub := list }}
{{- $responses := false }}
{{- range .perms }}
{{- $pub = concat $pub .pub }}
{{- with get . "pubDeny" }}{{ $pubDeny = concat $pubDeny . }}{{ end }}
{{- $sub = concat $sub .sub }}
{{- if get . "responses" }}{{ $responses = true }}{{ end }}
{{- end -}}
{
  user: {{ .user | quote }}
  password: ${{ .env }}
  permissions: {
    publish: {allow: {{ include "actloop.natsSubjects" (dict "s" $pub "replica" .replica) }}
      {{- if $pubDeny }}, deny: {{ include "actloop.natsSubjects" (dict "s" $pubDeny "replica" .replica) }}{{ end }}}
    subscribe: {allow: {{ include "actloop.natsSubjects" (dict "s" $sub "replica" .replica) }}}
    {{- if $responses }}
    allow_responses: true
    {{- end }}
  }
}
{{- end }}

{{/*
How a service logs in to an external NATS with a file: "creds:<Secret>",
"nkey:<Secret>" or "": the gen-worker group's own, else the component's,
else nats.credsSecret / nats.nkeySecret.
(dict "ctx" $ "c" <component values> ["o" <group values>]).
*/}}
{{- define "actloop.natsFileAuth" -}}
{{- $o := get . "o" | default dict }}
{{- $n := .ctx.Values.nats }}
{{- if get $o "natsCredsSecret" }}creds:{{ get $o "natsCredsSecret" }}
{{- else if get $o "natsNkeySecret" }}nkey:{{ get $o "natsNkeySecret" }}
{{- else if get .c "natsCredsSecret" }}creds:{{ get .c "natsCredsSecret" }}
{{- else if get .c "natsNkeySecret" }}nkey:{{ get .c "natsNkeySecret" }}
{{- else if $n.credsSecret }}creds:{{ $n.credsSecret }}
{{- else if $n.nkeySecret }}nkey:{{ $n.nkeySecret }}
{{- end }}
{{- end }}

{{/*
The servers an actloop container connects to, as JSON: nats and redis, or
nats only with "noRedis" (the gateway). (dict ... ["noRedis" true]).
*/}}
{{- define "actloop.servers" -}}
{{- if get . "noRedis" }}["nats"]{{ else }}["nats", "redis"]{{ end }}
{{- end }}

{{/*
The credential and TLS settings of an actloop container:
(dict "ctx" $ "c" <component values> ["o" <group values>] "natsUser" "..." "redisUser" "..." ["noRedis" true]).
*/}}
{{- define "actloop.securityEnv" -}}
{{- $v := .ctx.Values }}
{{- if include "actloop.unauthenticated" .ctx }}
- name: ACTLOOP_INSECURE
  value: "true"
{{- end }}
{{- if include "actloop.natsPerService" .ctx }}
- name: ACTLOOP_NATS_USER
  value: {{ .natsUser | quote }}
- name: ACTLOOP_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "actloop.natsSecretName" .ctx }}
      key: {{ printf "%s-%s" (include "actloop.natsPasswordKey" .ctx) .natsUser }}
{{- end }}
{{- if and (include "actloop.redisPerService" .ctx) (hasKey (include "actloop.redisUsers" .ctx | fromJson) .redisUser) }}
- name: ACTLOOP_REDIS_USERNAME
  value: {{ .redisUser | quote }}
- name: ACTLOOP_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "actloop.redisSecretName" .ctx }}
      key: {{ printf "%s-%s" (include "actloop.redisPasswordKey" .ctx) .redisUser }}
{{- end }}
{{- $nats := include "actloop.natsSecretsDir" . }}
{{- $auth := include "actloop.natsFileAuth" . }}
{{- if hasPrefix "creds:" $auth }}
- name: ACTLOOP_NATS_CREDS
  value: {{ printf "%s/user.creds" $nats | quote }}
{{- else if hasPrefix "nkey:" $auth }}
- name: ACTLOOP_NATS_NKEY
  value: {{ printf "%s/user.nk" $nats | quote }}
{{- end }}
{{- range $s := include "actloop.servers" . | fromJsonArray }}
{{- $t := include "actloop.clientTLS" (dict "ctx" $.ctx "s" $s) | fromJson }}
{{- $dir := include (printf "actloop.%sSecretsDir" $s) $ }}
{{- $prefix := printf "ACTLOOP_%s_TLS" (upper $s) }}
{{- if $t.secret }}
{{- if $t.ca }}
- name: {{ $prefix }}_CA
  value: {{ printf "%s/ca.crt" $dir | quote }}
{{- end }}
{{- if $t.clientCert }}
- name: {{ $prefix }}_CERT
  value: {{ printf "%s/tls.crt" $dir | quote }}
- name: {{ $prefix }}_KEY
  value: {{ printf "%s/tls.key" $dir | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The projected Secret volumes of securityEnv's files (same argument). */}}
{{- define "actloop.securityVolumes" -}}
{{- $v := .ctx.Values }}
{{- $auth := include "actloop.natsFileAuth" . }}
{{- range $s := include "actloop.servers" . | fromJsonArray }}
{{- $t := include "actloop.clientTLS" (dict "ctx" $.ctx "s" $s) | fromJson }}
{{- $sources := list }}
{{- if and (eq $s "nats") $auth }}
{{- $name := regexReplaceAll "^[a-z]+:" $auth "" }}
{{- if hasPrefix "creds:" $auth }}
{{- $sources = append $sources (dict "secret" (dict "name" $name "items" (list (dict "key" $v.nats.credsKey "path" "user.creds")))) }}
{{- else }}
{{- $sources = append $sources (dict "secret" (dict "name" $name "items" (list (dict "key" $v.nats.nkeyKey "path" "user.nk")))) }}
{{- end }}
{{- end }}
{{- if $t.secret }}
{{- $items := list }}
{{- if $t.ca }}{{ $items = append $items (dict "key" $t.ca "path" "ca.crt") }}{{ end }}
{{- if $t.clientCert }}
{{- $items = append $items (dict "key" $t.clientCert "path" "tls.crt") }}
{{- $items = append $items (dict "key" $t.clientKey "path" "tls.key") }}
{{- end }}
{{- $sources = append $sources (dict "secret" (dict "name" $t.secret "items" $items)) }}
{{- end }}
{{- if $sources }}
- name: {{ $s }}-secrets
  projected:
    # 0440: readable by the owner and the pod's fsGroup only.
    defaultMode: 288
    sources:
      {{- toYaml $sources | nindent 6 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The mounts of securityVolumes (same argument). */}}
{{- define "actloop.securityMounts" -}}
{{- range $s := include "actloop.servers" . | fromJsonArray }}
{{- if contains (printf "name: %s-secrets" $s) (include "actloop.securityVolumes" $) }}
- name: {{ $s }}-secrets
  mountPath: {{ include (printf "actloop.%sSecretsDir" $s) $ }}
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/*
The TLS of a service's client of server s (dict "ctx" $ "s" "nats"): the
values' s.tls, or for a bundled server that serves TLS (s.serverTLS) the
authorities of its certificate's Secret.
*/}}
{{- define "actloop.clientTLS" -}}
{{- $x := index .ctx.Values .s }}
{{- if include "actloop.serverTLS" . }}
{{- toJson (dict "secret" (include "actloop.serverTLSSecretName" .) "ca" "ca.crt" "clientCert" "" "clientKey" "") }}
{{- else }}
{{- toJson $x.tls }}
{{- end }}
{{- end }}

{{/* "true" when the bundled server s serves TLS: (dict "ctx" $ "s" "nats"). */}}
{{- define "actloop.serverTLS" -}}
{{- $x := index .ctx.Values .s }}
{{- if and $x.bundled $x.serverTLS.enabled }}true{{ end }}
{{- end }}

{{/* The Secret of the bundled server s's certificate: the values' or the chart's. */}}
{{- define "actloop.serverTLSSecretName" -}}
{{- (index .ctx.Values .s).serverTLS.secret | default (printf "%s-%s-tls" (include "actloop.fullname" .ctx) .s) }}
{{- end }}

{{/*
The names the bundled server s's certificate must hold, as JSON: its
Service's, and for NATS every server's behind the headless Service (the
routes between them). The chart's certificate also names localhost and
127.0.0.1.
*/}}
{{- define "actloop.serverTLSHosts" -}}
{{- $ctx := .ctx }}
{{- $ns := $ctx.Release.Namespace }}
{{- $svc := include (printf "actloop.%sServiceName" .s) $ctx }}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $ctx.Values.clusterDomain) }}
{{- if eq .s "nats" }}
{{- $h := include "actloop.natsHeadlessName" $ctx }}
{{- $hosts = append $hosts (printf "*.%s.%s.svc.%s" $h $ns $ctx.Values.clusterDomain) }}
{{- $hosts = append $hosts (printf "*.%s.%s.svc" $h $ns) }}
{{- end }}
{{- toJson $hosts }}
{{- end }}

{{/*
The chart's certificate for the bundled server s when it makes one
(serverTLS.enabled without serverTLS.secret), as JSON of its Secret's data
(base64): the one its Secret already holds, so an upgrade keeps it, else a
new CA and a certificate it signed for serverTLS.days. Made once per
rendering (kept in the values), as the passwords are.
*/}}
{{- define "actloop.serverTLSData" -}}
{{- $x := index .ctx.Values .s }}
{{- if not (hasKey $x.serverTLS "data") }}
{{- $data := dict }}
{{- with lookup "v1" "Secret" .ctx.Release.Namespace (include "actloop.serverTLSSecretName" .) }}
{{- if and .data (hasKey .data "tls.crt") (hasKey .data "tls.key") (hasKey .data "ca.crt") }}
{{- $data = pick .data "tls.crt" "tls.key" "ca.crt" }}
{{- end }}
{{- end }}
{{- if not $data }}
{{- $hosts := include "actloop.serverTLSHosts" . | fromJsonArray }}
{{- $ca := genCA (printf "%s %s CA" (include "actloop.fullname" .ctx) .s) (int $x.serverTLS.days) }}
{{- /* localhost and 127.0.0.1 too: the CLI through kubectl port-forward. */}}
{{- $cert := genSignedCert (first $hosts) (list "127.0.0.1") (append $hosts "localhost") (int $x.serverTLS.days) $ca }}
{{- $data = dict "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) "ca.crt" ($ca.Cert | b64enc) }}
{{- end }}
{{- $_ := set $x.serverTLS "data" $data }}
{{- end }}
{{- toJson $x.serverTLS.data }}
{{- end }}

{{/*
The bundled server s's TLS volume: (dict "ctx" $ "s" "nats"); and a
checksum of the chart's certificate, so the server restarts on a new one.
*/}}
{{- define "actloop.serverTLSVolume" -}}
- name: tls
  secret:
    secretName: {{ include "actloop.serverTLSSecretName" . }}
    defaultMode: 288
{{- end }}
{{- define "actloop.serverTLSChecksum" -}}
{{- if and (include "actloop.serverTLS" .) (not (index .ctx.Values .s).serverTLS.secret) }}
{{- include "actloop.serverTLSData" . | sha256sum }}
{{- end }}
{{- end }}

{{/* Checks of the credential and TLS values; part of actloop.validate. */}}
{{- define "actloop.validateSecurity" -}}
{{- $v := .Values }}
{{- $n := $v.nats }}
{{- /* Where a file authentication may be named: nats, each component, each group. */}}
{{- $levels := list (dict "at" "nats" "creds" "credsSecret" "nkey" "nkeySecret" "m" $n) }}
{{- range $c := list "coordinator" "genWorker" "envWorker" "predictorGw" "gateway" }}
{{- $levels = append $levels (dict "at" $c "creds" "natsCredsSecret" "nkey" "natsNkeySecret" "m" (index $v $c)) }}
{{- end }}
{{- range $i, $g := $v.genWorker.groups | default list }}
{{- if kindIs "map" $g }}
{{- $levels = append $levels (dict "at" (printf "genWorker.groups[%d]" $i) "creds" "natsCredsSecret" "nkey" "natsNkeySecret" "m" $g) }}
{{- end }}
{{- end }}
{{- range $levels }}
{{- $creds := get .m .creds }}
{{- $nkey := get .m .nkey }}
{{- if and $creds $nkey }}
{{- fail (printf "actloop: %s.%s and %s.%s: set at most one NATS authentication (a .creds file or an nkey seed, not both)" .at .creds .at .nkey) }}
{{- end }}
{{- $set := ternary .creds .nkey (not (empty $creds)) }}
{{- if or $creds $nkey }}
{{- if $n.bundled }}
{{- fail (printf "actloop: %s.%s: a .creds or nkey file is for an external NATS (nats.bundled: false); the bundled servers log users in with passwords (nats.auth)" .at $set) }}
{{- end }}
{{- if and (not $n.existingSecret.name) (regexMatch "://[^/,]*@" (toString $n.url)) }}
{{- fail (printf "actloop: %s.%s: nats.url carries credentials too; set one NATS authentication (take them out of the URL)" .at $set) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $n.credsSecret (not $n.credsKey) }}
{{- fail "actloop: nats.credsKey: the key of the .creds file in the Secrets is required" }}
{{- end }}
{{- if and $n.nkeySecret (not $n.nkeyKey) }}
{{- fail "actloop: nats.nkeyKey: the key of the nkey seed in the Secrets is required" }}
{{- end }}
{{- range $s := list "nats" "redis" }}
{{- $x := index $v $s }}
{{- $t := $x.tls }}
{{- if and $t.clientCert (not $t.clientKey) }}
{{- fail (printf "actloop: %s.tls.clientCert is set without %s.tls.clientKey: a client certificate needs its private key (both or neither)" $s $s) }}
{{- end }}
{{- if and $t.clientKey (not $t.clientCert) }}
{{- fail (printf "actloop: %s.tls.clientKey is set without %s.tls.clientCert (both or neither)" $s $s) }}
{{- end }}
{{- if and $x.serverTLS.enabled (not $x.bundled) }}
{{- fail (printf "actloop: %s.serverTLS.enabled: for the bundled server (%s.bundled: true); an external one's TLS is %s.tls" $s $s $s) }}
{{- end }}
{{- if and $x.serverTLS.enabled (lt (int $x.serverTLS.days) 1) }}
{{- fail (printf "actloop: %s.serverTLS.days: %v: the chart's certificate must be valid for a day at least" $s $x.serverTLS.days) }}
{{- end }}
{{- if $t.secret }}
{{- if $x.bundled }}
{{- fail (printf "actloop: %s.tls.secret: for an external server (%s.bundled: false); the bundled one's TLS is %s.serverTLS" $s $s $s) }}
{{- end }}
{{- if not (or $t.ca $t.clientCert) }}
{{- fail (printf "actloop: %s.tls.secret: set %s.tls.ca (the authorities' key) or %s.tls.clientCert and clientKey: nothing to mount" $s $s $s) }}
{{- end }}
{{- else if $t.clientCert }}
{{- fail (printf "actloop: %s.tls.clientCert: name the Secret that holds it in %s.tls.secret" $s $s) }}
{{- end }}
{{- end }}
{{- if and $v.redis.tls.secret (not $v.redis.existingSecret.name) (hasPrefix "unix://" (toString $v.redis.url)) }}
{{- fail "actloop: redis.tls.secret: TLS needs a redis:// or rediss:// URL, not unix://" }}
{{- end }}
{{- if include "actloop.natsPerService" . }}
{{- if and (not $n.existingSecret.name) (not $n.auth.servicePasswordSeed) }}
{{- fail "actloop: nats.auth.servicePasswordSeed is required with nats.auth.enabled and nats.auth.perService (each service's password is derived from it), or name a Secret in nats.existingSecret.name, or set nats.auth.perService false for one user" }}
{{- end }}
{{- if not $n.auth.user }}
{{- fail "actloop: nats.auth.user: the CLI's user name is required with nats.auth.enabled" }}
{{- end }}
{{- range include "actloop.natsServiceUsers" . | fromJsonArray }}
{{- if eq .user (toString $n.auth.user) }}
{{- fail (printf "actloop: nats.auth.user: %q is the user of a service; give the CLI another" .user) }}
{{- end }}
{{- end }}
{{- end }}
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
{{- include "actloop.ensureSecrets" . }}
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
{{- include "actloop.validateSecurity" . }}
{{- range $c := list "coordinator" "genWorker" "envWorker" "predictorGw" "gateway" }}
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
(dict "ctx" $ "c" .Values.coordinator "addr" "ACTLOOP_COORDINATOR_ADDR" ["noRedis" true]).
*/}}
{{- define "actloop.commonEnv" -}}
- name: ACTLOOP_NATS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "actloop.natsSecretName" .ctx }}
      key: {{ include "actloop.natsUrlKey" .ctx }}
{{- if not (get . "noRedis") }}
- name: ACTLOOP_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "actloop.redisSecretName" .ctx }}
      key: {{ include "actloop.redisUrlKey" .ctx }}
{{- if .ctx.Values.redis.cluster }}
{{- if .ctx.Values.redis.bundled }}
{{- fail "actloop: redis.cluster is for an external Redis Cluster: set redis.bundled=false and redis.url to its seed nodes" }}
{{- end }}
- name: ACTLOOP_REDIS_CLUSTER
  value: "true"
{{- end }}
{{- end }}
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

{{/* Pod annotations: (dict "ctx" $ "c" .Values.coordinator ["agentConfig" true] ["replica" <a gen-worker group's>]). */}}
{{- define "actloop.podAnnotations" -}}
{{- if .ctx.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ int .c.port | toString | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- if include "actloop.ownSecret" .ctx }}
{{- /* Of the chart's Secret, what this pod may read: not the passwords of
the gen-worker groups other than its own ("replica"), so that adding or
removing a group restarts no other pod. */}}
{{- $secret := include (print .ctx.Template.BasePath "/secret.yaml") .ctx | fromYaml }}
{{- $others := list }}
{{- range include "actloop.natsServiceUsers" .ctx | fromJsonArray }}
{{- if and (eq .role "gen-worker") (ne .replica (get $ "replica" | toString)) }}{{ $others = append $others .key }}{{ end }}
{{- end }}
{{- $kept := dict }}
{{- range $k, $v := $secret.stringData }}{{ if not (has $k $others) }}{{ $_ := set $kept $k $v }}{{ end }}{{ end }}
checksum/secret: {{ toJson $kept | sha256sum }}
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
      ["hostUsers" false] ["natsUser" <its bundled NATS user; default: service>] ["noRedis" true]).
*/}}
{{- define "actloop.podSpec" -}}
{{- $ctx := .ctx }}
{{- $c := .c }}
{{- $o := get . "o" | default dict }}
{{- $shutdown := int (include "actloop.shutdownSeconds" .) }}
{{- $sec := dict "ctx" $ctx "c" $c "o" $o "natsUser" (get . "natsUser" | default .service) "redisUser" .service "noRedis" (get . "noRedis") -}}
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
      {{- include "actloop.commonEnv" (dict "ctx" $ctx "c" $c "addr" .addr "noRedis" (get . "noRedis")) | nindent 6 }}
      {{- with include "actloop.otelEnv" (dict "ctx" $ctx "service" .service) | trim }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with include "actloop.securityEnv" $sec | trim }}
      {{- . | nindent 6 }}
      {{- end }}
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
      {{- if and (get . "agentConfig") $ctx.Values.model.dir $ctx.Values.model.volume }}
      - name: model
        mountPath: {{ $ctx.Values.model.dir }}
        readOnly: true
      {{- end }}
      {{- with include "actloop.securityMounts" $sec | trim }}
      {{- . | nindent 6 }}
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
  {{- if and (get . "agentConfig") $ctx.Values.model.dir $ctx.Values.model.volume }}
  - name: model
    {{- toYaml $ctx.Values.model.volume | nindent 4 }}
  {{- end }}
  {{- with include "actloop.securityVolumes" $sec | trim }}
  {{- . | nindent 2 }}
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

{{/* The coordinator's own settings: (dict "ctx" $). No ACTLOOP_REPLICAS: the
replicas (the gen-worker groups) join by their gen-workers' heartbeats, so
adding or removing a group does not roll the coordinator. */}}
{{- define "actloop.coordinatorEnv" -}}
{{- $c := .ctx.Values.coordinator }}
{{- include "actloop.podNameEnv" "ACTLOOP_COORDINATOR_ID" }}
- name: ACTLOOP_SLOTS
  value: {{ (int $c.slots) | default (int .ctx.Values.genWorker.slots) | toString | quote }}
- name: ACTLOOP_POLICY
  value: {{ $c.policy | quote }}
- name: ACTLOOP_LEADER_LEASE
  value: {{ $c.leaderLease | quote }}
{{- with $c.apiTokenSecret.name }}
- name: ACTLOOP_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $c.apiTokenSecret.key | quote }}
{{- else }}
{{- /* No token: the coordinator starts only insecure (actloop.insecureEnv). */}}
{{- end }}
{{- if include "actloop.unauthenticated" .ctx }}
{{- else if not $c.apiTokenSecret.name }}
- name: ACTLOOP_INSECURE
  value: "true"
{{- end }}
{{- end }}

{{/*
"true" when the bundled NATS or Redis wants no credentials
(nats.auth.enabled, redis.auth.enabled false): the services then start
only with ACTLOOP_INSECURE=true, which the chart sets and each service logs
as an error at every start (docs/security.md). External servers' credentials
are the services' to check.
*/}}
{{- define "actloop.unauthenticated" -}}
{{- $v := .Values }}
{{- if or (and $v.nats.bundled (not $v.nats.auth.enabled)) (and $v.redis.bundled (not $v.redis.auth.enabled)) }}true{{ end }}
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
{{- include "actloop.modelEnv" .ctx }}
{{- include "actloop.agentConfigEnv" .ctx }}
{{- end }}

{{/* The model's tokenizer settings, for workers: each only when set (an
unset one is the service's default, or ACTLOOP_MODEL_DIR's). */}}
{{- define "actloop.modelEnv" -}}
{{- with .Values.model.dir }}
- name: ACTLOOP_MODEL_DIR
  value: {{ . | quote }}
{{- end }}
{{- with .Values.model.tokenizer }}
- name: ACTLOOP_TOKENIZER
  value: {{ . | quote }}
{{- end }}
{{- with .Values.model.chatTemplate }}
- name: ACTLOOP_CHAT_TEMPLATE
  value: {{ . | quote }}
{{- end }}
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
{{- include "actloop.modelEnv" . }}
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

{{/*
The standard OpenTelemetry variables of an actloop container, from
.Values.otel: none unless otel.tracesExporter is set. (dict "ctx" $ "service" "coordinator").
*/}}
{{- define "actloop.otelEnv" -}}
{{- $o := .ctx.Values.otel }}
{{- if $o.tracesExporter }}
- name: OTEL_SERVICE_NAME
  value: {{ printf "actloop-%s" .service | quote }}
- name: OTEL_TRACES_EXPORTER
  value: {{ $o.tracesExporter | quote }}
{{- with $o.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $o.protocol }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ . | quote }}
{{- end }}
{{- with $o.headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $o.headersSecret.key | quote }}
{{- end }}
{{- with $o.resourceAttributes }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ . | quote }}
{{- end }}
{{- with $o.sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- with $o.samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ . | toString | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The gateway's own settings. */}}
{{- define "actloop.gatewayEnv" -}}
{{- $c := .Values.gateway }}
{{- $co := .Values.coordinator }}
- name: ACTLOOP_COORDINATOR_URL
  value: {{ printf "http://%s-coordinator:%d" (include "actloop.fullname" .) (int $co.port) | quote }}
- name: ACTLOOP_GATEWAY_MAX_WAIT
  value: {{ $c.maxWait | quote }}
- name: ACTLOOP_GATEWAY_MAX_BATCH
  value: {{ int $c.maxBatch | toString | quote }}
{{- with $co.apiTokenSecret.name }}
- name: ACTLOOP_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $co.apiTokenSecret.key | quote }}
{{- end }}
{{- if include "actloop.unauthenticated" . }}
{{- else if not $co.apiTokenSecret.name }}
- name: ACTLOOP_INSECURE
  value: "true"
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
{{- define "actloop.natsConfTLS" -}}
cert_file: "/etc/nats/tls/tls.crt"
key_file: "/etc/nats/tls/tls.key"
ca_file: "/etc/nats/tls/ca.crt"
timeout: 5
{{- end }}

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
{{- if include "actloop.serverTLS" (dict "ctx" . "s" "nats") }}
# TLS to clients and between the servers (nats.serverTLS).
tls {
  {{- include "actloop.natsConfTLS" . | nindent 2 }}
}
{{- end }}
cluster {
  name: {{ $sts }}
  port: 6222
  {{- if include "actloop.serverTLS" (dict "ctx" . "s" "nats") }}
  tls {
    {{- include "actloop.natsConfTLS" . | nindent 4 }}
  }
  {{- end }}
  routes: [
    {{- range $i, $_ := until (int $n.replicas) }}
    nats://{{ $sts }}-{{ $i }}.{{ $headless }}.{{ $.Release.Namespace }}.svc.{{ $.Values.clusterDomain }}:6222
    {{- end }}
  ]
}
{{- if include "actloop.natsPerService" . }}
{{- $perms := include "actloop.natsPermissions" . | fromJson }}
# Each service logs in as its own user, allowed only what it needs
# (docs/security.md, "NATS permissions"); the env-workers' ids are their pod names,
# so their user has every env-worker's subjects. nats.auth.user is the
# CLI's. Passwords from the environment (NATS_PASSWORD_*, the Secret).
authorization {
  users = [
    {{- range $u := include "actloop.natsServiceUsers" . | fromJsonArray }}
    {{- /* The gateway has the trainer's permissions, without every service's. */}}
    {{- $rows := ternary (list (index $perms $u.role)) (list $perms.base (index $perms $u.role)) (eq $u.role "gateway") }}
    {{- include "actloop.natsConfUser" (dict "user" $u.user "env" $u.env "replica" $u.replica "perms" $rows) | nindent 4 }}
    {{- end }}
    {{- include "actloop.natsConfUser" (dict "user" $n.auth.user "env" "NATS_PASSWORD" "replica" "" "perms" (list $perms.cli)) | nindent 4 }}
  ]
}
{{- else if $n.auth.enabled }}
authorization {
  user: {{ $n.auth.user | quote }}
  password: $NATS_PASSWORD
}
{{- end }}
{{- end }}

{{/*
The env-worker's seccomp profile as the kubelet names it (a Localhost
profile, relative to <kubelet root>/seccomp): files/env-worker-seccomp/
<uname -m>.json on each node, under a name of their content, so a new
profile never replaces the one a running pod was started with.
*/}}
{{- define "actloop.envWorkerSeccompProfile" -}}
{{- printf "actloop/env-worker-%s.json" (include "actloop.envWorkerSeccompFiles" . | sha256sum | trunc 12) }}
{{- end }}

{{/* The env-worker's seccomp profiles by machine, as ConfigMap data. */}}
{{- define "actloop.envWorkerSeccompFiles" -}}
{{- (.Files.Glob "files/env-worker-seccomp/*.json").AsConfig }}
{{- end }}

{{/* "true" when the chart puts the env-worker's seccomp profile on the nodes: envWorker.seccomp.install, and the env-worker uses the chart's profile. */}}
{{- define "actloop.installsSeccompProfile" -}}
{{- if and .Values.envWorker.seccomp.install (not (hasKey .Values.envWorker.containerSecurityContext "seccompProfile")) }}true{{ end }}
{{- end }}

{{/* The env-worker's container securityContext: envWorker.containerSecurityContext, with the chart's seccomp profile unless it names one. */}}
{{- define "actloop.envWorkerSecurityContext" -}}
{{- $sc := deepCopy .Values.envWorker.containerSecurityContext }}
{{- if not (hasKey $sc "seccompProfile") }}
{{- $_ := set $sc "seccompProfile" (dict "type" "Localhost" "localhostProfile" (include "actloop.envWorkerSeccompProfile" .)) }}
{{- end }}
{{- toYaml $sc }}
{{- end }}
