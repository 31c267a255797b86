package deploy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"

	"github.com/actloop/actloop/internal/launch"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/testkit"
)

const (
	chartDir  = "helm/actloop"
	release   = "rl"
	namespace = "actloop"
	// kubeVersion is the cluster version the chart is rendered for.
	kubeVersion = "v1.33.0"
)

// decoder decodes the typed kinds the chart may render, strictly: an
// unknown or duplicated field is an error.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// The kinds decoded as unstructured, each the only kind of its API
// version the chart renders: KEDA's ScaledObject and the Prometheus
// Operator's ServiceMonitor (their modules are not needed for a few fields).
const (
	kedaAPIVersion    = "keda.sh/v1alpha1"
	kedaKind          = "ScaledObject"
	monitorAPIVersion = "monitoring.coreos.com/v1"
	monitorKind       = "ServiceMonitor"
)

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func capabilities(t *testing.T) *chartutil.Capabilities {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	return caps
}

// render renders the chart with vals over its defaults, as `helm template
// --namespace actloop rl` with --strict (a reference to a missing value is
// an error). It returns the rendered files and the coalesced values.
func render(t *testing.T, vals map[string]any) (map[string]string, chartutil.Values, error) {
	t.Helper()
	ch := loadChart(t)
	opts := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValues(ch, vals, opts, capabilities(t))
	if err != nil {
		return nil, nil, err
	}
	out, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		return nil, nil, err
	}
	values, err := top.Table("Values")
	if err != nil {
		t.Fatal(err)
	}
	return out, values, nil
}

// valueFiles are the cases: the defaults and each ci/*.yaml.
func valueFiles(t *testing.T) map[string]map[string]any {
	t.Helper()
	cases := map[string]map[string]any{"default": {}}
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("%s/ci: %d values files, want at least 4", chartDir, len(files))
	}
	for _, f := range files {
		vals, err := chartutil.ReadValuesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cases[filepath.Base(f)] = vals.AsMap()
	}
	return cases
}

// manifests is a rendered release, decoded.
type manifests struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	daemonSets   []*appsv1.DaemonSet
	services     []*corev1.Service
	secrets      []*corev1.Secret
	configMaps   []*corev1.ConfigMap
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	scaled       []*unstructured.Unstructured
	monitors     []*unstructured.Unstructured // ServiceMonitors
	netpols      []*networkingv1.NetworkPolicy
	names        map[string]bool // kind/name
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits every rendered file into documents and decodes each
// strictly into its typed object.
func decode(t *testing.T, files map[string]string) *manifests {
	t.Helper()
	m := &manifests{names: map[string]bool{}}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt
		}
		for i, doc := range docSep.Split(files[name], -1) {
			if isBlank(doc) {
				continue
			}
			at := fmt.Sprintf("%s#%d", name, i)
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v\n%s", at, err, doc)
			}
			key := head.Kind + "/" + head.Metadata.Name
			if m.names[key] {
				t.Errorf("%s: %s rendered twice", at, key)
			}
			m.names[key] = true
			if head.Metadata.Namespace != namespace {
				t.Errorf("%s: %s: namespace %q, want %q", at, key, head.Metadata.Namespace, namespace)
			}
			if kind, ok := map[string]string{kedaAPIVersion: kedaKind, monitorAPIVersion: monitorKind}[head.APIVersion]; ok {
				if head.Kind != kind {
					t.Fatalf("%s: %s %s: want only %s from %s", at, head.APIVersion, head.Kind, kind, head.APIVersion)
				}
				js, err := yaml.YAMLToJSON([]byte(doc))
				if err != nil {
					t.Fatalf("%s: %v", at, err)
				}
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(js); err != nil {
					t.Fatalf("%s: %v", at, err)
				}
				if kind == kedaKind {
					m.scaled = append(m.scaled, u)
				} else {
					m.monitors = append(m.monitors, u)
				}
				continue
			}
			obj, gvk, err := decoder.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v\n%s", at, err, doc)
			}
			switch o := obj.(type) {
			case *appsv1.Deployment:
				m.deployments = append(m.deployments, o)
			case *appsv1.StatefulSet:
				m.statefulSets = append(m.statefulSets, o)
			case *appsv1.DaemonSet:
				m.daemonSets = append(m.daemonSets, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *corev1.Secret:
				m.secrets = append(m.secrets, o)
			case *corev1.ConfigMap:
				m.configMaps = append(m.configMaps, o)
			case *corev1.ServiceAccount:
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			case *autoscalingv2.HorizontalPodAutoscaler:
				m.hpas = append(m.hpas, o)
			case *networkingv1.NetworkPolicy:
				m.netpols = append(m.netpols, o)
			default:
				t.Fatalf("%s: unexpected kind %v", at, gvk)
			}
		}
	}
	return m
}

func isBlank(doc string) bool {
	for line := range strings.SplitSeq(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

const componentLabel = "app.kubernetes.io/component"

// reporter is where the checks report: the test, or a recorder that
// shows a check catches what it should.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	TempDir() string
	Setenv(key, value string)
}

func (m *manifests) deployment(t reporter, name string) *appsv1.Deployment {
	t.Helper()
	for _, d := range m.deployments {
		if d.Name == name {
			return d
		}
	}
	t.Errorf("no Deployment %s", name)
	return nil
}

func (m *manifests) statefulSet(name string) *appsv1.StatefulSet {
	for _, s := range m.statefulSets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (m *manifests) secret(name string) *corev1.Secret {
	for _, s := range m.secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (m *manifests) configMap(name string) *corev1.ConfigMap {
	for _, c := range m.configMaps {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (m *manifests) service(name string) *corev1.Service {
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// byComponent returns the Deployments whose pods carry component.
func (m *manifests) byComponent(component string) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range m.deployments {
		if d.Spec.Template.Labels[componentLabel] == component {
			out = append(out, d)
		}
	}
	return out
}

// container returns the container named name.
func container(t reporter, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Errorf("no container %s", name)
	return nil
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// envValue is a plain variable's value ("" when unset or not plain).
func envValue(c *corev1.Container, name string) string {
	if e := envVar(c, name); e != nil {
		return e.Value
	}
	return ""
}

// value reads a dotted path of the coalesced values.
func value(t reporter, vals chartutil.Values, path string) any {
	t.Helper()
	v, err := vals.PathValue(path)
	if err != nil {
		t.Errorf("values: %s: %v", path, err)
		return nil
	}
	return v
}

func intValue(t reporter, vals chartutil.Values, path string) int {
	t.Helper()
	switch v := value(t, vals, path).(type) {
	case float64:
		return int(v)
	case int:
		return v
	case int64:
		return int(v)
	default:
		t.Errorf("values: %s: %v is not a number", path, v)
		return 0
	}
}

func boolValue(t reporter, vals chartutil.Values, path string) bool {
	t.Helper()
	b, ok := value(t, vals, path).(bool)
	if !ok {
		t.Errorf("values: %s: not a bool", path)
	}
	return b
}

func stringValue(t reporter, vals chartutil.Values, path string) string {
	t.Helper()
	s, _ := value(t, vals, path).(string)
	return s
}

// group is a gen-worker group as the values give it, defaults applied.
type group struct {
	name, replica, url, api string
	slots, replicas         int
}

func groups(t reporter, vals chartutil.Values) []group {
	t.Helper()
	list, ok := value(t, vals, "genWorker.groups").([]any)
	if !ok {
		t.Errorf("values: genWorker.groups: not a list")
		return nil
	}
	var out []group
	for _, e := range list {
		g := e.(map[string]any)
		str := func(k, def string) string {
			if s, ok := g[k].(string); ok && s != "" {
				return s
			}
			return def
		}
		num := func(k string, def int) int {
			if f, ok := g[k].(float64); ok {
				return int(f)
			}
			return def
		}
		name := str("name", "")
		out = append(out, group{name: name, replica: str("replica", name), url: str("url", ""),
			api: str("api", stringValue(t, vals, "genWorker.api")), slots: num("slots", intValue(t, vals, "genWorker.slots")),
			replicas: num("replicas", intValue(t, vals, "genWorker.replicas"))})
	}
	return out
}

// The chart renders for its defaults and every ci/*.yaml, and what it
// renders holds together.
func TestChartRenders(t *testing.T) {
	for name, vals := range valueFiles(t) {
		t.Run(name, func(t *testing.T) {
			files, values, err := render(t, vals)
			if err != nil {
				t.Fatal(err)
			}
			again, _, err := render(t, vals)
			if err != nil || !reflect.DeepEqual(maskGenerated(files), maskGenerated(again)) {
				t.Fatalf("a second rendering differs, besides the passwords the chart makes (err %v)", err)
			}
			if notes := files["actloop/templates/NOTES.txt"]; !strings.Contains(notes, "Inference replicas (gen-worker groups") {
				t.Errorf("NOTES.txt: %q", notes)
			}
			checkAll(t, decode(t, files), values)
		})
	}
}

// checkAll runs every check of a rendered release.
func checkAll(t reporter, m *manifests, values chartutil.Values) {
	t.Helper()
	checkServices(t, m, values)
	checkGenWorkerGroups(t, m, values)
	checkEnvWorker(t, m, values)
	checkDisruptionBudgets(t, m)
	checkSecrets(t, m, values)
	checkCredentials(t, m, values)
	checkNATS(t, m, values)
	checkRedis(t, m, values)
	checkServerTLS(t, m, values)
	checkAllContainers(t, m)
	checkNetworkPolicies(t, m)
}

// checkNetworkPolicies: every pod (each Deployment and StatefulSet) is
// selected by a NetworkPolicy of both types; an actloop service's admits
// only its HTTP port and lets it out only to DNS, NATS, Redis and listed
// ports; the bundled Redis admits only the services.
func checkNetworkPolicies(t reporter, m *manifests) {
	t.Helper()
	type pod struct {
		at     string
		labels map[string]string
		ports  []int32
	}
	var pods []pod
	add := func(at string, tmpl *corev1.PodTemplateSpec) {
		var ports []int32
		for _, c := range tmpl.Spec.Containers {
			for _, p := range c.Ports {
				ports = append(ports, p.ContainerPort)
			}
		}
		pods = append(pods, pod{at, tmpl.Labels, ports})
	}
	for _, d := range m.deployments {
		add("Deployment "+d.Name, &d.Spec.Template)
	}
	for _, s := range m.statefulSets {
		add("StatefulSet "+s.Name, &s.Spec.Template)
	}
	for _, d := range m.daemonSets {
		add("DaemonSet "+d.Name, &d.Spec.Template)
	}
	for _, p := range pods {
		var found *networkingv1.NetworkPolicy
		for _, np := range m.netpols {
			sel := np.Spec.PodSelector.MatchLabels
			match := len(sel) > 0
			for k, v := range sel {
				match = match && p.labels[k] == v
			}
			if match {
				found = np
			}
		}
		if found == nil {
			t.Errorf("%s: no NetworkPolicy selects it", p.at)
			continue
		}
		if !slices.Contains(found.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(found.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			t.Errorf("%s: NetworkPolicy %s: policy types %v, want Ingress and Egress", p.at, found.Name, found.Spec.PolicyTypes)
		}
		comp := p.labels[componentLabel]
		for _, r := range found.Spec.Ingress {
			if len(r.Ports) == 0 {
				t.Errorf("%s: NetworkPolicy %s: an ingress rule for every port", p.at, found.Name)
			}
			if comp == "redis" && len(r.From) == 0 {
				t.Errorf("%s: NetworkPolicy %s: Redis open to every pod", p.at, found.Name)
			}
			for _, port := range r.Ports {
				if port.Port == nil || !slices.Contains(p.ports, port.Port.IntVal) {
					t.Errorf("%s: NetworkPolicy %s: admits port %v, which it does not serve (%v)", p.at, found.Name, port.Port, p.ports)
				}
			}
		}
		for _, r := range found.Spec.Egress {
			if len(r.Ports) == 0 {
				t.Errorf("%s: NetworkPolicy %s: an egress rule for every port", p.at, found.Name)
			}
		}
	}
}

// recorder keeps what the checks report instead of failing the test.
type recorder struct {
	*testing.T
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// The checks catch each kind of mistake (applied to a good rendering, or
// made through the values), naming it.
func TestChecksCatch(t *testing.T) {
	const (
		coord = release + "-actloop-coordinator"
		gen   = release + "-actloop-gen-worker-r0"
		env   = release + "-actloop-env-worker"
		pred  = release + "-actloop-predictor-gw"
	)
	first := func(m *manifests, name string) *corev1.Container {
		for _, d := range m.deployments {
			if d.Name == name {
				return &d.Spec.Template.Spec.Containers[0]
			}
		}
		panic("no Deployment " + name)
	}
	podSpec := func(m *manifests, name string) *corev1.PodSpec {
		for _, d := range m.deployments {
			if d.Name == name {
				return &d.Spec.Template.Spec
			}
		}
		panic("no Deployment " + name)
	}
	setEnv := func(c *corev1.Container, e corev1.EnvVar) {
		for i := range c.Env {
			if c.Env[i].Name == e.Name {
				c.Env[i] = e
				return
			}
		}
		c.Env = append(c.Env, e)
	}
	mount := func(c *corev1.Container, name string) *corev1.VolumeMount {
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == name {
				return &c.VolumeMounts[i]
			}
		}
		panic("no mount " + name)
	}
	// A user per service on the bundled NATS; credentials and TLS files
	// for external servers.
	perService := map[string]any{"nats": map[string]any{"auth": map[string]any{
		"enabled": true, "password": "cli-password", "servicePasswordSeed": "seed"}}}
	fileVals := map[string]any{
		"nats": map[string]any{"bundled": false, "url": "tls://nats:4222", "credsSecret": "creds",
			"tls": map[string]any{"secret": "nats-tls", "clientCert": "tls.crt", "clientKey": "tls.key"}},
		"redis": map[string]any{"bundled": false, "url": "rediss://redis:6379/0", "tls": map[string]any{"secret": "redis-tls"}},
	}
	tests := []struct {
		name    string
		vals    map[string]any
		mutate  func(m *manifests)
		wantErr string
	}{
		{name: "another service's variable", mutate: func(m *manifests) {
			setEnv(first(m, coord), corev1.EnvVar{Name: "ACTLOOP_LLM_URL", Value: "http://x:1"})
		}, wantErr: "ACTLOOP_LLM_URL is not a setting coordinator reads"},
		{name: "another service's variable in extraEnv", vals: map[string]any{"coordinator": map[string]any{
			"extraEnv": []any{map[string]any{"name": "ACTLOOP_ENV_SLOTS", "value": "4"}},
		}}, wantErr: "ACTLOOP_ENV_SLOTS is not a setting coordinator reads"},
		{name: "a setting set twice", vals: map[string]any{"genWorker": map[string]any{
			"extraEnv": []any{map[string]any{"name": "ACTLOOP_SLOTS", "value": "4"}},
		}}, wantErr: "ACTLOOP_SLOTS set twice"},
		{name: "env-worker unconfined", mutate: func(m *manifests) {
			first(m, env).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, wantErr: "env-worker: seccompProfile"},
		{name: "another seccomp profile installed", mutate: func(m *manifests) {
			cm := m.configMap(release + "-actloop-seccomp-profile")
			for k := range cm.Data {
				cm.Data[k] = "{}"
			}
		}, wantErr: "does not hold deploy.SeccompProfileFiles' profiles"},
		{name: "seccomp profile installed elsewhere", mutate: func(m *manifests) {
			m.daemonSets[0].Spec.Template.Spec.Volumes[1].HostPath.Path = "/var/lib/kubelet/seccomp"
		}, wantErr: "want hostPath /var/lib/kubelet/seccomp/actloop"},
		{name: "readiness on /healthz", mutate: func(m *manifests) {
			first(m, gen).ReadinessProbe.HTTPGet.Path = "/healthz"
		}, wantErr: "readiness probe"},
		{name: "no liveness probe", mutate: func(m *manifests) {
			first(m, pred).LivenessProbe = nil
		}, wantErr: "liveness probe"},
		{name: "no memory request", mutate: func(m *manifests) {
			delete(first(m, pred).Resources.Requests, corev1.ResourceMemory)
		}, wantErr: "no memory request"},
		{name: "address off the probed port", mutate: func(m *manifests) {
			setEnv(first(m, env), corev1.EnvVar{Name: "ACTLOOP_ENV_WORKER_ADDR", Value: ":9999"})
		}, wantErr: "ACTLOOP_ENV_WORKER_ADDR"},
		{name: "a group without its Deployment", mutate: func(m *manifests) {
			m.deployments = slices.DeleteFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == gen })
		}, wantErr: "0 gen-worker Deployments for 1 groups"},
		{name: "the coordinator told the replicas", mutate: func(m *manifests) {
			setEnv(first(m, coord), corev1.EnvVar{Name: "ACTLOOP_REPLICAS", Value: "r0"})
		}, wantErr: "ACTLOOP_REPLICAS"},
		{name: "no budget", mutate: func(m *manifests) {
			m.pdbs = slices.DeleteFunc(m.pdbs, func(p *policyv1.PodDisruptionBudget) bool { return p.Name == env })
		}, wantErr: "Deployment " + env + ": 0 PodDisruptionBudgets"},
		{name: "one stream replica on the cluster", mutate: func(m *manifests) {
			setEnv(first(m, pred), corev1.EnvVar{Name: "ACTLOOP_STREAM_REPLICAS", Value: "1"})
		}, wantErr: "ACTLOOP_STREAM_REPLICAS"},
		{name: "one NATS server", mutate: func(m *manifests) {
			one := int32(1)
			m.statefulSet(release + "-actloop-nats").Spec.Replicas = &one
		}, wantErr: "nats: replicas"},
		{name: "no fsync interval", mutate: func(m *manifests) {
			cm := m.configMap(release + "-actloop-nats")
			cm.Data["nats.conf"] = strings.Replace(cm.Data["nats.conf"], "sync_interval: 1s", "", 1)
		}, wantErr: "sync_interval"},
		{name: "one id for every env-worker", mutate: func(m *manifests) {
			setEnv(first(m, env), corev1.EnvVar{Name: "ACTLOOP_ENV_WORKER_ID", Value: "env-worker-0"})
		}, wantErr: "ACTLOOP_ENV_WORKER_ID: want the pod's name"},
		{name: "the Redis URL in plain text", mutate: func(m *manifests) {
			setEnv(first(m, coord), corev1.EnvVar{Name: "ACTLOOP_REDIS_URL", Value: "redis://:pw@redis:6379/0"})
		}, wantErr: "ACTLOOP_REDIS_URL: want it from a Secret"},
		{name: "a Secret nobody renders", mutate: func(m *manifests) {
			setEnv(first(m, gen), corev1.EnvVar{Name: "ACTLOOP_NATS_URL", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: "url"}}})
		}, wantErr: "neither renders nor is given"},
		{name: "too little time to drain", mutate: func(m *manifests) {
			g := int64(30)
			podSpec(m, env).TerminationGracePeriodSeconds = &g
		}, wantErr: "terminationGracePeriodSeconds"},
		{name: "root", mutate: func(m *manifests) {
			no := false
			podSpec(m, env).SecurityContext.RunAsNonRoot = &no
		}, wantErr: "runAsNonRoot"},
		{name: "a writable root", mutate: func(m *manifests) {
			no := false
			first(m, coord).SecurityContext.ReadOnlyRootFilesystem = &no
		}, wantErr: "read-only root"},
		{name: "sandboxes on the root", mutate: func(m *manifests) {
			c := first(m, env)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == "sandboxes" })
		}, wantErr: "ACTLOOP_SANDBOX_ROOT"},
		{name: "the wrong image", mutate: func(m *manifests) {
			first(m, env).Image = "actloop:0.1.0"
		}, wantErr: "image"},
		{name: "a service logs in as another's user", vals: perService, mutate: func(m *manifests) {
			setEnv(first(m, coord), corev1.EnvVar{Name: "ACTLOOP_NATS_USER", Value: "predictor-gw"})
		}, wantErr: "Deployment " + coord + ": logs in as predictor-gw with Secret key nats-password-coordinator, not the password"},
		{name: "a user allowed more than docs/security.md's table", vals: perService, mutate: func(m *manifests) {
			cm := m.configMap(release + "-actloop-nats")
			cm.Data["nats.conf"] = strings.Replace(cm.Data["nats.conf"], `"actloop.predict"]}`, `"actloop.predict", "actloop.>"]}`, 1)
		}, wantErr: "logs in as predictor-gw: publish"},
		{name: "a user nobody logs in as", vals: perService, mutate: func(m *manifests) {
			m.deployments = slices.DeleteFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == pred })
		}, wantErr: "nats.conf: user predictor-gw: no service logs in as it"},
		{name: "two services with one password", vals: perService, mutate: func(m *manifests) {
			s := m.secret(release + "-actloop")
			s.StringData["nats-password-predictor-gw"] = s.StringData["nats-password-coordinator"]
		}, wantErr: "hold the same password"},
		{name: "a credentials file not mounted", vals: fileVals, mutate: func(m *manifests) {
			c := first(m, gen)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == "nats-secrets" })
		}, wantErr: "Deployment " + gen + ": ACTLOOP_NATS_CREDS: /var/run/secrets/actloop/nats/user.creds: no volume mounted there"},
		{name: "a credentials file from another Secret", vals: fileVals, mutate: func(m *manifests) {
			for _, v := range podSpec(m, coord).Volumes {
				if v.Projected != nil {
					v.Projected.Sources[0].Secret.Name = "other"
				}
			}
		}, wantErr: "ACTLOOP_NATS_CREDS: /var/run/secrets/actloop/nats/user.creds is Secret other key nats.creds, want creds key nats.creds"},
		{name: "a writable Secret mount", vals: fileVals, mutate: func(m *manifests) {
			mount(first(m, pred), "redis-secrets").ReadOnly = false
		}, wantErr: "volume redis-secrets is mounted writable"},
		{name: "a client certificate without its key", vals: fileVals, mutate: func(m *manifests) {
			c := first(m, pred)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "ACTLOOP_NATS_TLS_KEY" })
		}, wantErr: "ACTLOOP_NATS_TLS_CERT and ACTLOOP_NATS_TLS_KEY: a client certificate needs its key"},
		{name: "two NATS authentications", vals: fileVals, mutate: func(m *manifests) {
			setEnv(first(m, coord), corev1.EnvVar{Name: "ACTLOOP_NATS_NKEY", Value: "/var/run/secrets/actloop/nats/user.creds"})
		}, wantErr: "[ACTLOOP_NATS_CREDS ACTLOOP_NATS_NKEY]: one NATS authentication at most"},
		{name: "the env-worker's credentials where its sandboxes see them", vals: fileVals, mutate: func(m *manifests) {
			c := first(m, env)
			mount(c, "nats-secrets").MountPath = "/etc/actloop/nats"
			for i := range c.Env {
				c.Env[i].Value = strings.Replace(c.Env[i].Value, "/var/run/secrets/actloop/nats/", "/etc/actloop/nats/", 1)
			}
		}, wantErr: "Secret volume nats-secrets at /etc/actloop/nats: the bwrap sandboxes mount /etc"},
		{name: "an agent configuration not mounted", vals: map[string]any{"agentConfig": "agent: {}\n"}, mutate: func(m *manifests) {
			c := first(m, gen)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == "agent-config" })
		}, wantErr: "ACTLOOP_AGENT_CONFIG"},
		{name: "the gateway given Redis", mutate: func(m *manifests) {
			setEnv(first(m, release+"-actloop-gateway"), corev1.EnvVar{Name: "ACTLOOP_REDIS_PASSWORD", Value: "x"})
		}, wantErr: "ACTLOOP_REDIS_PASSWORD: the gateway does not connect to Redis"},
		{name: "the gateway with every service's permissions", vals: perService, mutate: func(m *manifests) {
			cm := m.configMap(release + "-actloop-nats")
			head, tail, _ := strings.Cut(cm.Data["nats.conf"], "$NATS_PASSWORD_GATEWAY")
			cm.Data["nats.conf"] = head + "$NATS_PASSWORD_GATEWAY" + strings.Replace(tail, "allow: [", `allow: ["$JS.API.INFO", `, 1)
		}, wantErr: "logs in as gateway: publish"},
		{name: "the gateway without its deny list", vals: perService, mutate: func(m *manifests) {
			cm := m.configMap(release + "-actloop-nats")
			cm.Data["nats.conf"] = withoutDeny(cm.Data["nats.conf"], "$NATS_PASSWORD_GATEWAY")
		}, wantErr: "logs in as gateway: publish"},
		{name: "the CLI's user without its deny list", vals: perService, mutate: func(m *manifests) {
			cm := m.configMap(release + "-actloop-nats")
			cm.Data["nats.conf"] = withoutDeny(cm.Data["nats.conf"], "$NATS_PASSWORD\n")
		}, wantErr: "want docs/security.md's CLI (trainer) row"},
		{name: "an OTLP headers Secret not given", mutate: func(m *manifests) {
			setEnv(first(m, coord), corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_HEADERS", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "h"}}})
		}, wantErr: "OTEL_EXPORTER_OTLP_HEADERS from Secret nope"},
	}
	// The good rendering passes.
	files, values, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{T: t}
	checkAll(r, decode(t, files), values)
	if len(r.errs) != 0 {
		t.Fatalf("the good rendering: %q", r.errs)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, values, err := render(t, tt.vals)
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, files)
			if tt.mutate != nil {
				tt.mutate(m)
			}
			r := &recorder{T: t}
			checkAll(r, m, values)
			if !slices.ContainsFunc(r.errs, func(e string) bool { return strings.Contains(e, tt.wantErr) }) {
				t.Fatalf("got %q, want an error containing %q", r.errs, tt.wantErr)
			}
		})
	}
}

// Credential settings no ci file holds render and pass the checks too.
func TestChartSecurityVariants(t *testing.T) {
	tests := map[string]map[string]any{
		"one NATS user for everything": {"nats": map[string]any{"auth": map[string]any{
			"enabled": true, "password": "pw", "perService": false}}},
		"a user per service, passwords from an existing Secret": {"nats": map[string]any{
			"auth": map[string]any{"enabled": true}, "existingSecret": map[string]any{"name": "my-nats", "passwordKey": "pw"}}},
		"the seccomp profile put on the nodes by hand": {"envWorker": map[string]any{"seccomp": map[string]any{
			"install": false, "kubeletRoot": "/var/lib/k0s/kubelet/"}}},
		"the seccomp profile installed under another kubelet root": {"envWorker": map[string]any{"seccomp": map[string]any{
			"kubeletRoot": "/var/lib/k0s/kubelet/"}}},
		"a seccomp profile of one's own": {"envWorker": map[string]any{"containerSecurityContext": map[string]any{
			"seccompProfile": map[string]any{"type": "Localhost", "localhostProfile": "mine.json"}}}},
		"one nkey, TLS with the system's authorities": {"nats": map[string]any{"bundled": false, "url": "nats://n:4222",
			"nkeySecret": "nkey", "tls": map[string]any{"secret": "tls", "ca": "", "clientCert": "tls.crt", "clientKey": "tls.key"}}},
	}
	for name, vals := range tests {
		t.Run(name, func(t *testing.T) {
			files, values, err := render(t, vals)
			if err != nil {
				t.Fatal(err)
			}
			checkAll(t, decode(t, files), values)
		})
	}
}

// The ci files between them cover what they are meant to.
func TestValueFilesCover(t *testing.T) {
	seen := map[string]bool{}
	for _, vals := range valueFiles(t) {
		_, v, err := render(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		seen["bundled nats"] = seen["bundled nats"] || boolValue(t, v, "nats.bundled") && boolValue(t, v, "nats.auth.enabled")
		seen["bundled redis"] = seen["bundled redis"] || boolValue(t, v, "redis.bundled") && boolValue(t, v, "redis.auth.enabled")
		seen["external secrets"] = seen["external secrets"] || !boolValue(t, v, "nats.bundled") &&
			stringValue(t, v, "nats.existingSecret.name") != "" && stringValue(t, v, "redis.existingSecret.name") != ""
		seen["keda"] = seen["keda"] || boolValue(t, v, "envWorker.keda.enabled")
		seen["a nats user per service"] = seen["a nats user per service"] ||
			boolValue(t, v, "nats.bundled") && boolValue(t, v, "nats.auth.enabled") && boolValue(t, v, "nats.auth.perService")
		for _, k := range []string{"coordinator", "genWorker", "envWorker", "predictorGw", "gateway"} {
			seen["nats creds per component"] = seen["nats creds per component"] || stringValue(t, v, k+".natsCredsSecret") != ""
			seen["nats nkey"] = seen["nats nkey"] || stringValue(t, v, k+".natsNkeySecret") != ""
		}
		for _, g := range value(t, v, "genWorker.groups").([]any) {
			seen["nats creds per group"] = seen["nats creds per group"] || g.(map[string]any)["natsCredsSecret"] != nil
		}
		seen["nats creds"] = seen["nats creds"] || stringValue(t, v, "nats.credsSecret") != ""
		seen["nats client certificate"] = seen["nats client certificate"] ||
			stringValue(t, v, "nats.tls.secret") != "" && stringValue(t, v, "nats.tls.clientCert") != ""
		seen["redis tls"] = seen["redis tls"] || stringValue(t, v, "redis.tls.secret") != ""
		for _, s := range []string{"nats", "redis"} {
			if boolValue(t, v, s+".bundled") && boolValue(t, v, s+".serverTLS.enabled") {
				seen["bundled "+s+" tls, "+map[bool]string{true: "its own certificate", false: "the chart's"}[stringValue(t, v, s+".serverTLS.secret") != ""]] = true
			}
		}
		seen["service monitors"] = seen["service monitors"] || boolValue(t, v, "metrics.serviceMonitor.enabled")
		seen["otel"] = seen["otel"] || stringValue(t, v, "otel.tracesExporter") != "" && stringValue(t, v, "otel.headersSecret.name") != ""
		gs := groups(t, v)
		seen["two openai groups"] = seen["two openai groups"] ||
			len(gs) >= 2 && !slices.ContainsFunc(gs, func(g group) bool { return g.api != "openai" })
	}
	for _, want := range []string{"bundled nats", "bundled redis", "external secrets", "keda", "two openai groups",
		"a nats user per service", "nats creds", "nats creds per component", "nats creds per group", "nats nkey",
		"nats client certificate", "redis tls", "bundled nats tls, the chart's", "bundled redis tls, its own certificate",
		"service monitors", "otel"} {
		if !seen[want] {
			t.Errorf("no values file covers %s", want)
		}
	}
}

// actloopServices maps each actloop component to the image target it runs.
var actloopServices = map[string]string{
	"coordinator":  "image",
	"gen-worker":   "image",
	"env-worker":   "envWorker.image",
	"predictor-gw": "image",
	"gateway":      "image",
}

// addrSetting is the variable of each service's HTTP address.
var addrSetting = map[string]string{
	"coordinator":  "ACTLOOP_COORDINATOR_ADDR",
	"gen-worker":   "ACTLOOP_GEN_WORKER_ADDR",
	"env-worker":   "ACTLOOP_ENV_WORKER_ADDR",
	"predictor-gw": "ACTLOOP_PREDICTOR_ADDR",
	"gateway":      "ACTLOOP_GATEWAY_ADDR",
}

// podIDSetting is the variable that must be unique per pod, if any.
var podIDSetting = map[string]string{
	"coordinator": "ACTLOOP_COORDINATOR_ID",
	"gen-worker":  "ACTLOOP_WORKER_ID",
	"env-worker":  "ACTLOOP_ENV_WORKER_ID",
}

// checkServices checks every actloop Deployment against the service it
// runs: its command, image, the settings it reads, its address and probes,
// its drain time, its security context.
func checkServices(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	if len(launch.Names) != len(actloopServices) {
		t.Errorf("services %v; the test knows %v", launch.Names, slices.Sorted(maps.Keys(actloopServices)))
		return
	}
	for _, d := range m.deployments {
		svc := d.Spec.Template.Labels[componentLabel]
		at := "Deployment " + d.Name
		if _, ok := actloopServices[svc]; !ok {
			t.Errorf("%s: component %q is not an actloop service %v", at, svc, launch.Names)
			continue
		}
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match its pods' labels (%v)", at, d.Spec.Selector, err)
		}
		spec := &d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Errorf("%s: %d containers, want 1", at, len(spec.Containers))
		}
		c := container(t, spec, svc)
		if c == nil {
			continue
		}
		if !slices.Equal(c.Args, []string{"serve", svc}) {
			t.Errorf("%s: args %q, want serve %s", at, c.Args, svc)
		}
		img := actloopServices[svc]
		repo, tag := stringValue(t, vals, img+".repository"), stringValue(t, vals, img+".tag")
		if tag == "" {
			tag = d.Labels["app.kubernetes.io/version"] // the chart's appVersion
		}
		if c.Image != repo+":"+tag {
			t.Errorf("%s: image %q, want %s:%s", at, c.Image, repo, tag)
		}

		// Only settings the service reads, each once.
		reads := launch.Settings(svc)
		seen := map[string]bool{}
		for _, e := range c.Env {
			if seen[e.Name] {
				t.Errorf("%s: %s set twice", at, e.Name)
			}
			seen[e.Name] = true
			if strings.HasPrefix(e.Name, "ACTLOOP_") && !slices.Contains(reads, e.Name) {
				t.Errorf("%s: %s is not a setting %s reads", at, e.Name, svc)
			}
		}
		for _, k := range []string{"ACTLOOP_NATS_URL", "ACTLOOP_REDIS_URL"} {
			if svc == "gateway" && k == "ACTLOOP_REDIS_URL" {
				continue // checked below: it connects to NATS only
			}
			if e := envVar(c, k); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: %s: want it from a Secret (secretKeyRef)", at, k)
			}
		}
		if svc == "gateway" {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "ACTLOOP_REDIS_") {
					t.Errorf("%s: %s: the gateway does not connect to Redis", at, e.Name)
				}
			}
		}
		if id := podIDSetting[svc]; id != "" {
			if e := envVar(c, id); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("%s: %s: want the pod's name (fieldRef metadata.name)", at, id)
			}
		}

		// Served where the probes ask.
		addr := envValue(c, addrSetting[svc])
		var port int32
		for _, p := range c.Ports {
			if p.Name == "http" {
				port = p.ContainerPort
			}
		}
		if port == 0 || addr != fmt.Sprintf(":%d", port) {
			t.Errorf("%s: %s %q, container port http %d: want the same", at, addrSetting[svc], addr, port)
		}
		probe := func(name string, p *corev1.Probe, path string) {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
				t.Errorf("%s: %s probe %+v: want GET %s on port http", at, name, p, path)
			}
		}
		probe("liveness", c.LivenessProbe, "/healthz")
		probe("readiness", c.ReadinessProbe, "/readyz")
		if c.StartupProbe != nil {
			probe("startup", c.StartupProbe, "/healthz")
		}

		// Long enough to drain.
		timeout, err := time.ParseDuration(envValue(c, "ACTLOOP_SHUTDOWN_TIMEOUT"))
		if err != nil || timeout <= 0 {
			t.Errorf("%s: ACTLOOP_SHUTDOWN_TIMEOUT %q: %v", at, envValue(c, "ACTLOOP_SHUTDOWN_TIMEOUT"), err)
		}
		// After the steps: flushing NATS (5s), draining it (up to 10s) and
		// the HTTP server (5s).
		margin := time.Duration(intValue(t, vals, "terminationGraceMarginSeconds")) * time.Second
		if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second != timeout+margin || margin < 20*time.Second {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want ACTLOOP_SHUTDOWN_TIMEOUT (%v) + the margin (%v, at least 20s)", at, g, timeout, margin)
		}

		// The agent configuration, where the workers are told it is.
		if path := envValue(c, "ACTLOOP_AGENT_CONFIG"); path != "" {
			checkMountedFile(t, m, at, spec, c, path)
		}

		// Non-root, as the image's user.
		wantUID := int64(65532)
		if svc == "env-worker" {
			wantUID = 10001
		}
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != wantUID {
			t.Errorf("%s: pod securityContext %+v: want runAsNonRoot, runAsUser %d", at, psc, wantUID)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container securityContext %+v: want no privilege escalation, a read-only root", at, sc)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: the pods need no API token", at)
		}
	}
	for svc := range actloopServices {
		if len(m.byComponent(svc)) == 0 {
			t.Errorf("no Deployment runs %s", svc)
		}
	}

	// The coordinator: several, each with its own id; a Service.
	coord := m.deployment(t, release+"-actloop-coordinator")
	if coord == nil {
		return
	}
	if want := int32(intValue(t, vals, "coordinator.replicas")); coord.Spec.Replicas == nil || *coord.Spec.Replicas != want {
		t.Errorf("coordinator: replicas %v, want %d", coord.Spec.Replicas, want)
	}
	for _, name := range []string{release + "-actloop-coordinator", release + "-actloop-predictor-gw", release + "-actloop-gateway"} {
		s := m.service(name)
		d := m.deployment(t, name)
		if d == nil {
			continue
		}
		if s == nil {
			t.Errorf("no Service %s", name)
			continue
		}
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Service %s: selector %v does not select its Deployment's pods", name, s.Spec.Selector)
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != "http" {
			t.Errorf("Service %s: ports %+v: want the container's http port", name, s.Spec.Ports)
		}
	}
}

// checkMountedFile: path is a key of a rendered ConfigMap mounted at its
// directory.
func checkMountedFile(t reporter, m *manifests, at string, spec *corev1.PodSpec, c *corev1.Container, path string) {
	t.Helper()
	dir, file := filepath.Split(path)
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) != filepath.Clean(dir) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				if cm := m.configMap(v.ConfigMap.Name); cm != nil && cm.Data[file] != "" {
					return
				}
			}
		}
	}
	t.Errorf("%s: ACTLOOP_AGENT_CONFIG %s: no key of a rendered ConfigMap mounted there", at, path)
}

// checkGenWorkerGroups: one Deployment per group, with its replica, server
// and API; the coordinator has no ACTLOOP_REPLICAS (the groups join by
// heartbeat), so that a group added or removed leaves it as it is.
func checkGenWorkerGroups(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	gs := groups(t, vals)
	deps := m.byComponent("gen-worker")
	if len(deps) != len(gs) {
		t.Errorf("%d gen-worker Deployments for %d groups", len(deps), len(gs))
	}
	var replicas []string
	for _, g := range gs {
		replicas = append(replicas, g.replica)
		d := m.deployment(t, release+"-actloop-gen-worker-"+g.name)
		if d == nil {
			continue
		}
		c := container(t, &d.Spec.Template.Spec, "gen-worker")
		if c == nil {
			continue
		}
		for k, want := range map[string]string{
			"ACTLOOP_REPLICA": g.replica, "ACTLOOP_LLM_URL": g.url, "ACTLOOP_LLM_API": g.api,
			"ACTLOOP_SLOTS": fmt.Sprint(g.slots),
		} {
			if got := envValue(c, k); got != want {
				t.Errorf("gen-worker %s: %s %q, want %q", g.name, k, got, want)
			}
		}
		if d.Spec.Replicas == nil || int(*d.Spec.Replicas) != g.replicas {
			t.Errorf("gen-worker %s: replicas %v, want %d", g.name, d.Spec.Replicas, g.replicas)
		}
		if d.Spec.Template.Labels["actloop/group"] != g.name {
			t.Errorf("gen-worker %s: pods labelled group %q", g.name, d.Spec.Template.Labels["actloop/group"])
		}
	}
	d := m.deployment(t, release+"-actloop-coordinator")
	if d == nil {
		return
	}
	coord := container(t, &d.Spec.Template.Spec, "coordinator")
	if coord == nil {
		return
	}
	if got := envValue(coord, "ACTLOOP_REPLICAS"); got != "" {
		t.Errorf("coordinator: ACTLOOP_REPLICAS %q, want none (the groups %q join by heartbeat)", got, replicas)
	}
}

// checkEnvWorker: its image target, a writable sandbox root, and scaling
// by a CPU HorizontalPodAutoscaler or a KEDA ScaledObject on the
// env-start consumer's lag.
func checkEnvWorker(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	name := release + "-actloop-env-worker"
	d := m.deployment(t, name)
	if d == nil {
		return
	}
	spec := &d.Spec.Template.Spec
	c := container(t, spec, "env-worker")
	if c == nil {
		return
	}
	root := envValue(c, "ACTLOOP_SANDBOX_ROOT")
	var vol string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == root && !vm.ReadOnly {
			vol = vm.Name
		}
	}
	if root == "" || !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol && v.EmptyDir != nil }) {
		t.Errorf("env-worker: ACTLOOP_SANDBOX_ROOT %q: want a writable emptyDir mounted there", root)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == "/tmp" }) {
		t.Errorf("env-worker: no writable /tmp under a read-only root")
	}
	checkSeccompProfile(t, m, vals, spec, c)

	keda, hpa := boolValue(t, vals, "envWorker.keda.enabled"), boolValue(t, vals, "envWorker.autoscaling.enabled")
	if (keda || hpa) != (d.Spec.Replicas == nil) {
		t.Errorf("env-worker: replicas %v with autoscaling %v, keda %v: want them set only when nothing scales it", d.Spec.Replicas, hpa, keda)
	}
	switch {
	case keda:
		if len(m.hpas) != 0 {
			t.Errorf("env-worker: an HPA next to KEDA's own")
		}
		if len(m.scaled) != 1 {
			t.Errorf("env-worker: %d ScaledObjects, want 1", len(m.scaled))
			return
		}
		so := m.scaled[0]
		if so.GetAPIVersion() != kedaAPIVersion || so.GetKind() != kedaKind {
			t.Errorf("ScaledObject: %s %s", so.GetAPIVersion(), so.GetKind())
		}
		if target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name"); target != name {
			t.Errorf("ScaledObject: scaleTargetRef %q, want %s", target, name)
		}
		triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
		found := false
		for _, tr := range triggers {
			tr := tr.(map[string]any)
			if tr["type"] != "nats-jetstream" {
				continue
			}
			found = true
			md, _ := tr["metadata"].(map[string]any)
			for k, want := range map[string]string{"stream": "ACTLOOP_ENV", "consumer": "env-start", "account": "$G"} {
				if md[k] != want {
					t.Errorf("ScaledObject: trigger %s %v, want %q", k, md[k], want)
				}
			}
			for _, k := range []string{"natsServerMonitoringEndpoint", "lagThreshold"} {
				if s, ok := md[k].(string); !ok || s == "" {
					t.Errorf("ScaledObject: trigger %s %v: want a string", k, md[k])
				}
			}
		}
		if !found {
			t.Errorf("ScaledObject: no nats-jetstream trigger")
		}
	case hpa:
		if len(m.scaled) != 0 || len(m.hpas) != 1 {
			t.Errorf("env-worker: %d HPAs, %d ScaledObjects; want one HPA", len(m.hpas), len(m.scaled))
			return
		}
		h := m.hpas[0]
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != name {
			t.Errorf("HPA: target %+v, want Deployment %s", h.Spec.ScaleTargetRef, name)
		}
		if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
			t.Errorf("HPA: metrics %+v, want CPU", h.Spec.Metrics)
		}
	default:
		if len(m.hpas)+len(m.scaled) != 0 {
			t.Errorf("env-worker: autoscaled while autoscaling is off")
		}
	}
}

// checkDisruptionBudgets: every Deployment and the NATS StatefulSet has a
// PodDisruptionBudget selecting its pods, and no budget selects pods of two.
// checkSeccompProfile checks the env-worker's seccomp profile: the
// chart's (deploy.SeccompProfileFiles' for each machine) as a Localhost
// profile named by its content, installed by a DaemonSet on the
// env-worker's nodes with envWorker.seccomp.install, or the one
// containerSecurityContext names.
func checkSeccompProfile(t reporter, m *manifests, vals chartutil.Values, spec *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	files, err := SeccompProfileFiles()
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	profiles := map[string]string{} // by machine
	for name, b := range files {
		if machine, ok := strings.CutPrefix(name, "helm/actloop/files/env-worker-seccomp/"); ok {
			profiles[machine] = string(b)
		}
	}
	// As Helm's Files.AsConfig writes them (YAML, the last newline
	// trimmed), and sha256sum hashes.
	cfg, err := yaml.Marshal(profiles)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	sum := sha256.Sum256(bytes.TrimSuffix(cfg, []byte("\n")))
	file := fmt.Sprintf("env-worker-%x.json", sum[:6])
	got := c.SecurityContext.SeccompProfile
	csc, err := vals.Table("envWorker.containerSecurityContext")
	if err != nil {
		t.Errorf("values: %v", err)
		return
	}
	own, ownSet := csc["seccompProfile"].(map[string]any)
	if ownSet {
		if got == nil || string(got.Type) != own["type"] {
			t.Errorf("env-worker: seccompProfile %+v, want envWorker.containerSecurityContext's %v", got, own)
		}
	} else if got == nil || got.Type != corev1.SeccompProfileTypeLocalhost || got.LocalhostProfile == nil || *got.LocalhostProfile != "actloop/"+file {
		t.Errorf("env-worker: seccompProfile %+v, want Localhost actloop/%s", got, file)
	}
	install := boolValue(t, vals, "envWorker.seccomp.install") && !ownSet
	if !install {
		if len(m.daemonSets) != 0 {
			t.Errorf("a seccomp profile installer, with the env-worker's profile %+v and envWorker.seccomp.install %v",
				got, boolValue(t, vals, "envWorker.seccomp.install"))
		}
		return
	}
	if len(m.daemonSets) != 1 {
		t.Errorf("%d DaemonSets, want the seccomp profile's installer", len(m.daemonSets))
		return
	}
	ds := m.daemonSets[0]
	ispec := &ds.Spec.Template.Spec
	if !reflect.DeepEqual(ispec.NodeSelector, spec.NodeSelector) || !reflect.DeepEqual(ispec.Tolerations, spec.Tolerations) ||
		!reflect.DeepEqual(ispec.Affinity, spec.Affinity) {
		t.Errorf("DaemonSet %s: scheduled elsewhere than the env-worker", ds.Name)
	}
	if len(ispec.Containers) != 1 {
		t.Errorf("DaemonSet %s: %d containers, want 1", ds.Name, len(ispec.Containers))
		return
	}
	ic := &ispec.Containers[0]
	mounts := map[string]*corev1.Volume{}
	for _, vm := range ic.VolumeMounts {
		for i := range ispec.Volumes {
			if ispec.Volumes[i].Name == vm.Name {
				mounts[vm.MountPath] = &ispec.Volumes[i]
			}
		}
	}
	host := strings.TrimSuffix(stringValue(t, vals, "envWorker.seccomp.kubeletRoot"), "/") + "/seccomp/actloop"
	if v := mounts["/host"]; v == nil || v.HostPath == nil || v.HostPath.Path != host {
		t.Errorf("DaemonSet %s: /host is %+v, want hostPath %s", ds.Name, v, host)
	}
	if v := mounts["/profile"]; v == nil || v.ConfigMap == nil {
		t.Errorf("DaemonSet %s: /profile is %+v, want a ConfigMap", ds.Name, v)
	} else if cm := m.configMap(v.ConfigMap.Name); cm == nil || !maps.Equal(cm.Data, profiles) {
		t.Errorf("DaemonSet %s: ConfigMap %s does not hold deploy.SeccompProfileFiles' profiles by machine", ds.Name, v.ConfigMap.Name)
	}
	if script := strings.Join(ic.Args, " "); !strings.Contains(script, `"/profile/$(uname -m).json"`) || !strings.Contains(script, " /host/"+file) {
		t.Errorf("DaemonSet %s: %q does not put /profile/<machine>.json at /host/%s", ds.Name, script, file)
	}
	if sc := ic.SecurityContext; sc == nil || sc.Privileged != nil && *sc.Privileged || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("DaemonSet %s: container securityContext %+v, want a read-only root and no capabilities", ds.Name, sc)
	}
}

func checkDisruptionBudgets(t reporter, m *manifests) {
	t.Helper()
	type workload struct {
		name string
		pods map[string]string
	}
	var ws []workload
	for _, d := range m.deployments {
		ws = append(ws, workload{"Deployment " + d.Name, d.Spec.Template.Labels})
	}
	for _, s := range m.statefulSets {
		if s.Spec.Template.Labels[componentLabel] == "nats" {
			ws = append(ws, workload{"StatefulSet " + s.Name, s.Spec.Template.Labels})
		}
	}
	for _, w := range ws {
		n := 0
		for _, p := range m.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Errorf("PDB %s: %v", p.Name, err)
				continue
			}
			if sel.Matches(labels.Set(w.pods)) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select its pods, want 1", w.name, n)
		}
	}
	for _, p := range m.pdbs {
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			t.Errorf("PDB %s: want one of minAvailable, maxUnavailable", p.Name)
		}
	}
}

// checkSecrets: each secretKeyRef names the chart's Secret and a key it
// has, or a Secret of the user's the values name (existingSecret, the API
// token's, the OTLP headers').
func checkSecrets(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	own := release + "-actloop"
	allowed := map[string]bool{own: true}
	for _, k := range []string{"nats.existingSecret", "redis.existingSecret", "coordinator.apiTokenSecret", "otel.headersSecret"} {
		if s := stringValue(t, vals, k+".name"); s != "" {
			allowed[s] = true
		}
	}
	check := func(at string, c corev1.Container) {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			if !allowed[ref.Name] {
				t.Errorf("%s: %s from Secret %s, which the chart neither renders nor is given", at, e.Name, ref.Name)
				continue
			}
			if s := m.secret(ref.Name); s != nil {
				if _, ok := s.StringData[ref.Key]; !ok {
					t.Errorf("%s: %s from %s key %s: no such key", at, e.Name, ref.Name, ref.Key)
				}
			} else if ref.Name == own {
				t.Errorf("%s: %s from Secret %s, not rendered", at, e.Name, own)
			}
		}
	}
	for _, d := range m.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			check("Deployment "+d.Name, c)
		}
	}
	for _, s := range m.statefulSets {
		for _, c := range s.Spec.Template.Spec.Containers {
			check("StatefulSet "+s.Name, c)
		}
	}
	bothExisting := stringValue(t, vals, "nats.existingSecret.name") != "" && stringValue(t, vals, "redis.existingSecret.name") != ""
	if bothExisting != (m.secret(own) == nil) {
		t.Errorf("Secret %s rendered: %v; want it only without existing Secrets for both", own, m.secret(own) != nil)
	}
	if s := m.secret(own); s != nil {
		if u, ok := s.StringData["nats-url"]; ok && !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			t.Errorf("Secret: nats-url %q", u)
		}
		if u, ok := s.StringData["redis-url"]; ok && !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
			t.Errorf("Secret: redis-url %q", u)
		}
	}
}

// checkNATS: bundled, a JetStream cluster of 3 servers whose configuration
// nats-server accepts, routes to each of them, the fsync interval of the
// values, and 3 stream replicas on every service.
func checkNATS(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	name := release + "-actloop-nats"
	sts := m.statefulSet(name)
	wantStream := "1"
	if !boolValue(t, vals, "nats.bundled") {
		if sts != nil {
			t.Errorf("an external NATS, and a bundled one")
		}
		if n := intValue(t, vals, "nats.streamReplicas"); n != 0 {
			wantStream = fmt.Sprint(n)
		}
	} else {
		wantStream = "3"
		if sts == nil {
			t.Errorf("no StatefulSet %s", name)
			return
		}
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
			t.Errorf("nats: replicas %v, want 3", sts.Spec.Replicas)
		}
		headless := m.service(name + "-headless")
		if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses || sts.Spec.ServiceName != headless.Name {
			t.Errorf("nats: want a headless Service (publishing not-ready addresses) as the StatefulSet's serviceName")
		}
		if m.service(name) == nil {
			t.Errorf("nats: no client Service %s", name)
		}
		c := container(t, &sts.Spec.Template.Spec, "nats")
		if c == nil {
			return
		}
		checkNATSContainer(t, c, sts)
		cm := m.configMap(name)
		if cm == nil {
			t.Errorf("no ConfigMap %s", name)
			return
		}
		checkNATSConf(t, m, c, cm.Data["nats.conf"], vals)
	}
	for _, d := range m.deployments {
		c := &d.Spec.Template.Spec.Containers[0]
		if got := envValue(c, "ACTLOOP_STREAM_REPLICAS"); got != wantStream {
			t.Errorf("Deployment %s: ACTLOOP_STREAM_REPLICAS %q, want %s", d.Name, got, wantStream)
		}
	}
}

// checkNATSContainer: the image, and the file store on the claim.
func checkNATSContainer(t reporter, c *corev1.Container, sts *appsv1.StatefulSet) {
	t.Helper()
	if c.Image != "nats:2.15-alpine" {
		t.Errorf("nats: image %q", c.Image)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("nats: %d volumeClaimTemplates, want 1 (the file store)", len(sts.Spec.VolumeClaimTemplates))
		return
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == sts.Spec.VolumeClaimTemplates[0].Name && vm.MountPath == "/data"
	}) {
		t.Errorf("nats: the claim is not mounted at /data")
	}
}

// secretValue is what the Secret key holds: the chart's Secret's value, or
// "from-<key>" for a Secret of the user's.
func secretValue(m *manifests, ref *corev1.SecretKeySelector) string {
	if s := m.secret(ref.Name); s != nil {
		if v, ok := s.StringData[ref.Key]; ok {
			return v
		}
	}
	return "from-" + ref.Key
}

// natsPasswordRef is where the bundled NATS password is (the CLI's user's
// with a user per service).
func natsPasswordRef(t reporter, vals chartutil.Values) *corev1.SecretKeySelector {
	t.Helper()
	name := stringValue(t, vals, "nats.existingSecret.name")
	if name == "" {
		name = release + "-actloop"
	}
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: passwordKey(t, vals)}
}

// checkNATSConf parses conf as nats-server does, in pod 1's environment
// (each variable the container c takes from a Secret as secretValue).
func checkNATSConf(t reporter, m *manifests, c *corev1.Container, conf string, vals chartutil.Values) {
	t.Helper()
	dir := t.TempDir()
	if strings.Contains(conf, "/etc/nats/tls/") {
		// The TLS volume's files: the chart's certificate, or a stand-in
		// for one of the user's.
		data := map[string][]byte{}
		if sec := m.secret(serverTLSSecret(t, vals, "nats")); sec != nil {
			data = sec.Data
		} else {
			data = selfSigned(t)
		}
		for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
			if err := os.WriteFile(filepath.Join(dir, k), data[k], 0o600); err != nil {
				t.Errorf("%v", err)
			}
		}
		conf = strings.ReplaceAll(conf, "/etc/nats/tls/", dir+"/")
	}
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Errorf("%v", err)
		return
	}
	t.Setenv("POD_NAME", release+"-actloop-nats-1")
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Setenv(e.Name, secretValue(m, e.ValueFrom.SecretKeyRef))
		}
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Errorf("nats.conf: %v\n%s", err, conf)
		return
	}
	if tlsOn := boolValue(t, vals, "nats.serverTLS.enabled"); (opts.TLSConfig != nil) != tlsOn || (opts.Cluster.TLSConfig != nil) != tlsOn {
		t.Errorf("nats.conf: TLS to clients %v, on the routes %v; want both %v", opts.TLSConfig != nil, opts.Cluster.TLSConfig != nil, tlsOn)
	}
	if opts.ServerName != release+"-actloop-nats-1" {
		t.Errorf("nats.conf: server_name %q, want the pod's name", opts.ServerName)
	}
	if !opts.JetStream || opts.StoreDir != "/data" {
		t.Errorf("nats.conf: JetStream %v in %q, want on in /data", opts.JetStream, opts.StoreDir)
	}
	if si := stringValue(t, vals, "nats.syncInterval"); si == "always" {
		if !opts.SyncAlways {
			t.Errorf("nats.conf: sync_interval not always")
		}
	} else if want, _ := time.ParseDuration(si); opts.SyncAlways || opts.SyncInterval != want {
		t.Errorf("nats.conf: sync_interval %v, want %v", opts.SyncInterval, want)
	}
	var routes []string
	for _, u := range opts.Routes {
		routes = append(routes, u.Host)
	}
	var want []string
	for i := range 3 {
		want = append(want, fmt.Sprintf("%s-actloop-nats-%d.%s-actloop-nats-headless.%s.svc.cluster.local:6222", release, i, release, namespace))
	}
	if !slices.Equal(routes, want) || opts.Cluster.Port != 6222 || opts.Cluster.Name == "" {
		t.Errorf("nats.conf: cluster %q port %d routes %q, want routes %q", opts.Cluster.Name, opts.Cluster.Port, routes, want)
	}
	switch auth, perService := boolValue(t, vals, "nats.auth.enabled"), boolValue(t, vals, "nats.auth.perService"); {
	case auth && perService:
		checkNATSUsers(t, m, opts, vals)
	case auth:
		if want := secretValue(m, natsPasswordRef(t, vals)); opts.Password != want || opts.Username != stringValue(t, vals, "nats.auth.user") {
			t.Errorf("nats.conf: user %q password %q, want nats.auth.user and %q (the Secret's)", opts.Username, opts.Password, want)
		}
	default:
		if opts.Username != "" || len(opts.Users) != 0 || len(opts.Nkeys) != 0 {
			t.Errorf("nats.conf: users without nats.auth")
		}
	}
	if opts.HTTPPort != 8222 {
		t.Errorf("nats.conf: http_port %d, want 8222 (probes, KEDA)", opts.HTTPPort)
	}
}

// withoutDeny is conf without the publish deny list of the first user
// after marker (its password's variable).
func withoutDeny(conf, marker string) string {
	head, tail, _ := strings.Cut(conf, marker)
	i := strings.Index(tail, ", deny: [")
	if i < 0 {
		return conf
	}
	j := strings.Index(tail[i:], "]")
	return head + marker + tail[:i] + tail[i+j+1:]
}

// passwordKey is the key of the bundled NATS password in its Secret.
func passwordKey(t reporter, vals chartutil.Values) string {
	t.Helper()
	if stringValue(t, vals, "nats.existingSecret.name") != "" {
		return stringValue(t, vals, "nats.existingSecret.passwordKey")
	}
	return "nats-password"
}

// natsPerms is one client's row of the NATS permissions table in
// docs/security.md: what it may publish and subscribe to, what it may not
// publish (publish's deny), and a subscribe deny, which no row has.
type natsPerms struct {
	pub, sub         []string
	pubDeny, subDeny []string
	responses        bool // allow_responses
}

// add is p with q's subjects added, placeholders replaced.
func (p natsPerms) add(q natsPerms, subst map[string]string) natsPerms {
	fill := func(s string) string {
		if subst["<id>"] == "*" { // the env-worker's consumer, env-<id>, is then any
			s = strings.ReplaceAll(s, "env-<id>", "*")
		}
		for k, v := range subst {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	out := natsPerms{pub: slices.Clone(p.pub), sub: slices.Clone(p.sub), pubDeny: slices.Clone(p.pubDeny),
		subDeny: slices.Clone(p.subDeny), responses: p.responses || q.responses}
	for _, s := range q.pub {
		out.pub = append(out.pub, fill(s))
	}
	for _, s := range q.sub {
		out.sub = append(out.sub, fill(s))
	}
	for _, s := range q.pubDeny {
		out.pubDeny = append(out.pubDeny, fill(s))
	}
	for _, s := range q.subDeny {
		out.subDeny = append(out.subDeny, fill(s))
	}
	return out
}

// equal compares the allow and deny lists as sets.
func (p natsPerms) equal(q natsPerms) bool {
	set := func(l []string) []string { return slices.Compact(slices.Sorted(slices.Values(l))) }
	return slices.Equal(set(p.pub), set(q.pub)) && slices.Equal(set(p.sub), set(q.sub)) &&
		slices.Equal(set(p.pubDeny), set(q.pubDeny)) && slices.Equal(set(p.subDeny), set(q.subDeny)) && p.responses == q.responses
}

func (p natsPerms) String() string {
	return fmt.Sprintf("publish %q, publish denied %q, subscribe %q, subscribe denied %q, allow_responses %v",
		p.pub, p.pubDeny, p.sub, p.subDeny, p.responses)
}

// documentedPermissions reads the table of the repository's
// docs/security.md, section "NATS permissions", by client ("every service",
// "coordinator", ..., "CLI (trainer)").
func documentedPermissions(t reporter) map[string]natsPerms {
	t.Helper()
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	_, sec, ok := strings.Cut(string(b), "\n## NATS permissions\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, table, ok2 := strings.Cut(sec, "| client | publish | subscribe | publish denied |\n|---|---|---|---|\n")
	if !ok || !ok2 {
		t.Errorf("docs/security.md: no table in a NATS permissions section")
		return nil
	}
	code := regexp.MustCompile("`([^`]+)`")
	out := map[string]natsPerms{}
	for line := range strings.SplitSeq(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 4 {
			t.Errorf("docs/security.md permissions row %q: want 4 cells", line)
			return nil
		}
		var p natsPerms
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			if m[1] == "allow_responses" {
				p.responses = true
			} else {
				p.pub = append(p.pub, m[1])
			}
		}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			p.sub = append(p.sub, m[1])
		}
		for _, m := range code.FindAllStringSubmatch(cells[3], -1) {
			p.pubDeny = append(p.pubDeny, m[1])
		}
		out[cells[0]] = p
	}
	for _, c := range []string{"every service", "coordinator", "gen-worker", "env-worker", "predictor-gw", "CLI (trainer)", "gateway"} {
		if _, ok := out[c]; !ok {
			t.Errorf("docs/security.md permissions table: no row %q", c)
			return nil
		}
	}
	return out
}

// serverPerms are a configured user's permissions.
func serverPerms(u *server.User) natsPerms {
	var p natsPerms
	if u.Permissions == nil {
		return p
	}
	if u.Permissions.Publish != nil {
		p.pub, p.pubDeny = u.Permissions.Publish.Allow, u.Permissions.Publish.Deny
	}
	if u.Permissions.Subscribe != nil {
		p.sub, p.subDeny = u.Permissions.Subscribe.Allow, u.Permissions.Subscribe.Deny
	}
	p.responses = u.Permissions.Response != nil
	return p
}

// checkNATSUsers: with a user per service, the bundled servers have one
// user per service and the CLI's, each with exactly its row (and every
// service's) of docs/security.md's permissions table; each Deployment logs in as
// the user of its service (its replica's, for a gen-worker) with the
// password the servers expect (the same Secret key); the chart's own
// passwords differ from each other.
func checkNATSUsers(t reporter, m *manifests, opts *server.Options, vals chartutil.Values) {
	t.Helper()
	table := documentedPermissions(t)
	if table == nil {
		return
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		if users[u.Username] != nil {
			t.Errorf("nats.conf: user %s twice", u.Username)
		}
		users[u.Username] = u
	}
	if opts.Username != "" || len(opts.Nkeys) != 0 {
		t.Errorf("nats.conf: a single user or nkeys next to the users")
	}
	used := map[string]bool{}
	cli := stringValue(t, vals, "nats.auth.user")
	if u := users[cli]; u == nil {
		t.Errorf("nats.conf: no user %s (nats.auth.user, the CLI's)", cli)
	} else {
		used[cli] = true
		if got, want := serverPerms(u), table["CLI (trainer)"]; !got.equal(want) {
			t.Errorf("nats.conf: user %s: %v, want docs/security.md's CLI (trainer) row: %v", cli, got, want)
		}
		if want := secretValue(m, natsPasswordRef(t, vals)); u.Password != want {
			t.Errorf("nats.conf: user %s: password %q, want %q (the Secret's)", cli, u.Password, want)
		}
	}
	for _, d := range m.deployments {
		svc := d.Spec.Template.Labels[componentLabel]
		c := &d.Spec.Template.Spec.Containers[0]
		at := "Deployment " + d.Name
		name := envValue(c, "ACTLOOP_NATS_USER")
		pw := envVar(c, "ACTLOOP_NATS_PASSWORD")
		if pw == nil || pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: ACTLOOP_NATS_PASSWORD: want it from a Secret", at)
			continue
		}
		u := users[name]
		if u == nil {
			t.Errorf("%s: ACTLOOP_NATS_USER %q: no such user in nats.conf", at, name)
			continue
		}
		used[name] = true
		if secretValue(m, pw.ValueFrom.SecretKeyRef) != u.Password {
			t.Errorf("%s: logs in as %s with Secret key %s, not the password the servers have for it", at, name, pw.ValueFrom.SecretKeyRef.Key)
		}
		subst := map[string]string{"<replica>": envValue(c, "ACTLOOP_REPLICA"), "<id>": "*"}
		want := table["every service"].add(table[svc], subst)
		if svc == "gateway" { // the trainer's permissions, without every service's
			want = natsPerms{}.add(table[svc], nil)
		}
		if got := serverPerms(u); !got.equal(want) {
			t.Errorf("%s: logs in as %s: %v; want docs/security.md's rows for every service and %s: %v", at, name, got, svc, want)
		}
		if name == cli {
			t.Errorf("%s: logs in as the CLI's user %s", at, name)
		}
	}
	for name := range users {
		if !used[name] {
			t.Errorf("nats.conf: user %s: no service logs in as it", name)
		}
	}
	if s := m.secret(release + "-actloop"); s != nil && stringValue(t, vals, "nats.existingSecret.name") == "" {
		seen := map[string]string{}
		for k, v := range s.StringData {
			if !strings.HasPrefix(k, "nats-password") {
				continue
			}
			if other, ok := seen[v]; ok {
				t.Errorf("Secret: %s and %s hold the same password", k, other)
			}
			seen[v] = k
		}
		if s.StringData["nats-url"] == "" || strings.Contains(s.StringData["nats-url"], "@") {
			t.Errorf("Secret: nats-url %q: want it without credentials (each service has its own)", s.StringData["nats-url"])
		}
	}
}

// fileSettings are the settings naming files of credentials and TLS.
var fileSettings = []string{
	"ACTLOOP_NATS_CREDS", "ACTLOOP_NATS_NKEY", "ACTLOOP_NATS_TLS_CA", "ACTLOOP_NATS_TLS_CERT", "ACTLOOP_NATS_TLS_KEY",
	"ACTLOOP_REDIS_TLS_CA", "ACTLOOP_REDIS_TLS_CERT", "ACTLOOP_REDIS_TLS_KEY",
}

// secretFile is a key of a Secret.
type secretFile struct{ secret, key string }

// sandboxVisible are the directories the env-worker's bwrap sandboxes
// mount read-only (pkg/sandbox, bwrapSystemArgs): nothing secret there.
var sandboxVisible = []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// mountedSecretFile finds the Secret key the file path of container c is:
// a read-only mount of a Secret volume, or of a projected volume of
// Secrets, whose item (or key) is that file.
func mountedSecretFile(spec *corev1.PodSpec, c *corev1.Container, path string) (secretFile, error) {
	for _, vm := range c.VolumeMounts {
		rel, err := filepath.Rel(vm.MountPath, path)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") || vm.SubPath != "" {
			continue
		}
		if !vm.ReadOnly {
			return secretFile{}, fmt.Errorf("%s: volume %s is mounted writable", path, vm.Name)
		}
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			switch {
			case v.Secret != nil:
				if len(v.Secret.Items) == 0 {
					return secretFile{v.Secret.SecretName, rel}, nil
				}
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						return secretFile{v.Secret.SecretName, it.Key}, nil
					}
				}
			case v.Projected != nil:
				for _, src := range v.Projected.Sources {
					if src.Secret == nil {
						continue
					}
					for _, it := range src.Secret.Items {
						if it.Path == rel {
							return secretFile{src.Secret.Name, it.Key}, nil
						}
					}
				}
			}
			return secretFile{}, fmt.Errorf("%s: not a file of a Secret in volume %s", path, vm.Name)
		}
		return secretFile{}, fmt.Errorf("%s: volume %s is not in the pod", path, vm.Name)
	}
	return secretFile{}, fmt.Errorf("%s: no volume mounted there", path)
}

// valuesKey maps each actloop component to its values.
var valuesKey = map[string]string{
	"coordinator":  "coordinator",
	"gen-worker":   "genWorker",
	"env-worker":   "envWorker",
	"predictor-gw": "predictorGw",
	"gateway":      "gateway",
}

// wantFiles are the credential and TLS files the values give a
// Deployment of component svc (group: its gen-worker group's name).
func wantFiles(t reporter, vals chartutil.Values, svc, group string) map[string]secretFile {
	t.Helper()
	want := map[string]secretFile{}
	var g map[string]any
	if group != "" {
		list, _ := value(t, vals, "genWorker.groups").([]any)
		for _, e := range list {
			if e, ok := e.(map[string]any); ok && e["name"] == group {
				g = e
			}
		}
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	comp := valuesKey[svc]
	creds, nkey := str(g, "natsCredsSecret"), str(g, "natsNkeySecret")
	if creds == "" && nkey == "" {
		creds, nkey = stringValue(t, vals, comp+".natsCredsSecret"), stringValue(t, vals, comp+".natsNkeySecret")
	}
	if creds == "" && nkey == "" {
		creds, nkey = stringValue(t, vals, "nats.credsSecret"), stringValue(t, vals, "nats.nkeySecret")
	}
	switch {
	case creds != "":
		want["ACTLOOP_NATS_CREDS"] = secretFile{creds, stringValue(t, vals, "nats.credsKey")}
	case nkey != "":
		want["ACTLOOP_NATS_NKEY"] = secretFile{nkey, stringValue(t, vals, "nats.nkeyKey")}
	}
	for _, s := range []string{"nats", "redis"} {
		if s == "redis" && svc == "gateway" {
			continue // NATS only
		}
		prefix := "ACTLOOP_" + strings.ToUpper(s) + "_TLS_"
		if boolValue(t, vals, s+".bundled") && boolValue(t, vals, s+".serverTLS.enabled") {
			want[prefix+"CA"] = secretFile{serverTLSSecret(t, vals, s), "ca.crt"}
			continue
		}
		secret := stringValue(t, vals, s+".tls.secret")
		if secret == "" {
			continue
		}
		for setting, key := range map[string]string{"CA": "ca", "CERT": "clientCert", "KEY": "clientKey"} {
			if k := stringValue(t, vals, s+".tls."+key); k != "" {
				want[prefix+setting] = secretFile{secret, k}
			}
		}
	}
	return want
}

// serverTLSSecret is the Secret of bundled server s's certificate.
func serverTLSSecret(t reporter, vals chartutil.Values, s string) string {
	if name := stringValue(t, vals, s+".serverTLS.secret"); name != "" {
		return name
	}
	return release + "-actloop-" + s + "-tls"
}

// checkServerTLS: a bundled server that serves TLS (serverTLS) has its
// certificate's Secret mounted and configured (NATS to clients and on its
// routes, Redis on its only port), its URL says TLS (tls://, rediss://),
// and a certificate the chart makes is signed by the CA it ships (which
// the services trust: checkCredentials) for server and client use, naming
// the URL's host and, for NATS, every route's.
func checkServerTLS(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	for _, s := range []string{"nats", "redis"} {
		if !boolValue(t, vals, s+".bundled") {
			continue
		}
		name := release + "-actloop-" + s
		sts := m.statefulSet(name)
		if sts == nil {
			continue
		}
		on := boolValue(t, vals, s+".serverTLS.enabled")
		vol := slices.IndexFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "tls" })
		if !on {
			if vol >= 0 {
				t.Errorf("%s: a TLS volume without %s.serverTLS.enabled", s, s)
			}
			continue
		}
		secret := serverTLSSecret(t, vals, s)
		if vol < 0 || sts.Spec.Template.Spec.Volumes[vol].Secret == nil || sts.Spec.Template.Spec.Volumes[vol].Secret.SecretName != secret {
			t.Errorf("%s: want Secret %s mounted as its TLS volume", s, secret)
		}
		host := ""
		if own := m.secret(release + "-actloop"); own != nil {
			scheme := map[string]string{"nats": "tls://", "redis": "rediss://"}[s]
			u := own.StringData[s+"-url"]
			if !strings.HasPrefix(u, scheme) {
				t.Errorf("Secret: %s-url %q, want %s with %s.serverTLS", s, u, scheme, s)
			}
			host = urlHost(u)
		}
		c := container(t, &sts.Spec.Template.Spec, s)
		if c == nil {
			continue
		}
		routes := []string(nil)
		if s == "nats" {
			conf := m.configMap(name).Data["nats.conf"]
			if strings.Count(conf, `cert_file: "/etc/nats/tls/tls.crt"`) != 2 {
				t.Errorf("nats.conf: want TLS to clients and on the routes:\n%s", conf)
			}
			for _, r := range regexp.MustCompile(`nats://([^:\s]+):6222`).FindAllStringSubmatch(conf, -1) {
				routes = append(routes, r[1])
			}
		} else if args := strings.Join(c.Args, " "); !strings.Contains(args, "--port 0 --tls-port 6379") {
			t.Errorf("redis: args %q: want TLS only", args)
		}
		if stringValue(t, vals, s+".serverTLS.secret") != "" {
			continue // a certificate of the user's
		}
		sec := m.secret(secret)
		if sec == nil || sec.Type != corev1.SecretTypeTLS {
			t.Errorf("no Secret %s of type %s", secret, corev1.SecretTypeTLS)
			continue
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(sec.Data["ca.crt"]) {
			t.Errorf("Secret %s: ca.crt holds no certificate", secret)
			continue
		}
		pair, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
		if err != nil {
			t.Errorf("Secret %s: %v", secret, err)
			continue
		}
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Errorf("Secret %s: %v", secret, err)
			continue
		}
		// localhost and 127.0.0.1 too: the CLI through kubectl port-forward.
		for _, h := range append([]string{host, "localhost", "127.0.0.1"}, routes...) {
			for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := cert.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
					t.Errorf("Secret %s: the certificate for %s (usage %v): %v", secret, h, use, err)
				}
			}
		}
	}
}

// checkCredentials: every credential or TLS file a service is told of is a
// key of the Secret the values name for it, mounted read-only (the
// env-worker's outside what its sandboxes see), and it is told of each
// such file; at most one NATS authentication; client certificates with
// their keys; a password with its user.
func checkCredentials(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	natsURL := ""
	if s := m.secret(release + "-actloop"); s != nil {
		natsURL = s.StringData["nats-url"]
	}
	for _, d := range m.deployments {
		svc := d.Spec.Template.Labels[componentLabel]
		at := "Deployment " + d.Name
		spec := &d.Spec.Template.Spec
		c := &spec.Containers[0]
		want := wantFiles(t, vals, svc, d.Spec.Template.Labels["actloop/group"])
		for _, k := range fileSettings {
			path := envValue(c, k)
			w, wanted := want[k]
			switch {
			case path == "" && wanted:
				t.Errorf("%s: %s not set; the values give it %s key %s", at, k, w.secret, w.key)
			case path == "":
			case !wanted:
				t.Errorf("%s: %s %s: the values give it no such file", at, k, path)
			default:
				got, err := mountedSecretFile(spec, c, path)
				if err != nil {
					t.Errorf("%s: %s: %v", at, k, err)
				} else if got != w {
					t.Errorf("%s: %s: %s is Secret %s key %s, want %s key %s", at, k, path, got.secret, got.key, w.secret, w.key)
				}
			}
		}
		var methods []string
		for _, k := range []string{"ACTLOOP_NATS_USER", "ACTLOOP_NATS_TOKEN", "ACTLOOP_NATS_CREDS", "ACTLOOP_NATS_NKEY"} {
			if envVar(c, k) != nil {
				methods = append(methods, k)
			}
		}
		if strings.Contains(natsURL, "@") && envVar(c, "ACTLOOP_NATS_URL") != nil {
			methods = append(methods, "ACTLOOP_NATS_URL (user info)")
		}
		if len(methods) > 1 {
			t.Errorf("%s: %v: one NATS authentication at most", at, methods)
		}
		if (envVar(c, "ACTLOOP_NATS_USER") == nil) != (envVar(c, "ACTLOOP_NATS_PASSWORD") == nil) {
			t.Errorf("%s: ACTLOOP_NATS_USER and ACTLOOP_NATS_PASSWORD: both or neither", at)
		}
		for _, s := range []string{"NATS", "REDIS"} {
			cert, key := "ACTLOOP_"+s+"_TLS_CERT", "ACTLOOP_"+s+"_TLS_KEY"
			if (envVar(c, cert) == nil) != (envVar(c, key) == nil) {
				t.Errorf("%s: %s and %s: a client certificate needs its key (both or neither)", at, cert, key)
			}
		}
		if svc != "env-worker" {
			continue
		}
		for _, vm := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name != vm.Name || v.Secret == nil && v.Projected == nil {
					continue
				}
				for _, dir := range sandboxVisible {
					if vm.MountPath == dir || strings.HasPrefix(vm.MountPath, dir+"/") {
						t.Errorf("%s: Secret volume %s at %s: the bwrap sandboxes mount %s, so the model's commands could read it", at, v.Name, vm.MountPath, dir)
					}
				}
			}
		}
	}
}

// checkRedis: bundled, one server with the append-only file fsynced as the
// values say, on a claim.
func checkRedis(t reporter, m *manifests, vals chartutil.Values) {
	t.Helper()
	sts := m.statefulSet(release + "-actloop-redis")
	if !boolValue(t, vals, "redis.bundled") {
		if sts != nil {
			t.Errorf("an external Redis, and a bundled one")
		}
		return
	}
	if sts == nil {
		t.Errorf("no Redis StatefulSet")
		return
	}
	c := container(t, &sts.Spec.Template.Spec, "redis")
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--appendonly yes") || !strings.Contains(args, "--appendfsync "+stringValue(t, vals, "redis.appendfsync")) {
		t.Errorf("redis: args %q: want AOF fsynced %s", args, stringValue(t, vals, "redis.appendfsync"))
	}
	if auth := boolValue(t, vals, "redis.auth.enabled"); auth != strings.Contains(args, "--requirepass $(REDIS_PASSWORD)") {
		t.Errorf("redis: args %q with auth %v", args, auth)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("redis: no claim for its data")
	}
	checkRedisUsers(t, m, vals, c)
}

// redisServerUsers are the ACL users of a redis-server command line: each
// --user's arguments after its name ("on", ">password", its rules), by name.
func redisServerUsers(args []string) map[string][]string {
	users := map[string][]string{}
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "--user" {
			continue
		}
		j := i + 2
		for j < len(args) && !strings.HasPrefix(args[j], "--") {
			j++
		}
		users[args[i+1]] = args[i+2 : j]
		i = j - 1
	}
	return users
}

// checkRedisUsers: with a user per service (redis.auth.perService), the
// bundled Redis has docs/security.md's users (service.RedisTable), each
// with service.RedisRules and the password each service of that name logs
// in with; the URL carries no password. Without, no user and no service
// logs in as one.
func checkRedisUsers(t reporter, m *manifests, vals chartutil.Values, c *corev1.Container) {
	t.Helper()
	perService := boolValue(t, vals, "redis.auth.enabled") && boolValue(t, vals, "redis.auth.perService")
	users := redisServerUsers(c.Args)
	if !perService {
		if len(users) > 0 {
			t.Errorf("redis: users %v without redis.auth.perService", slices.Collect(maps.Keys(users)))
		}
		for _, d := range m.deployments {
			if envVar(&d.Spec.Template.Spec.Containers[0], "ACTLOOP_REDIS_USERNAME") != nil {
				t.Errorf("Deployment %s: a Redis user without redis.auth.perService", d.Name)
			}
		}
		return
	}
	if s := m.secret(release + "-actloop"); s != nil && strings.Contains(s.StringData["redis-url"], "@") {
		t.Errorf("Secret: redis-url %q carries a password with a user per service", s.StringData["redis-url"])
	}
	if len(users) != len(service.RedisTable) {
		t.Errorf("redis: users %v, want those of service.RedisTable", slices.Collect(maps.Keys(users)))
	}
	for user := range service.RedisTable {
		args := users[user]
		env := "REDIS_PASSWORD_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_"))
		want := append([]string{"on", ">$(" + env + ")"}, service.RedisRules(user)...)
		if !slices.Equal(args, want) {
			t.Errorf("redis: user %s: %q, want %q", user, args, want)
		}
		ref := envVar(c, env)
		if ref == nil || ref.ValueFrom == nil || ref.ValueFrom.SecretKeyRef == nil {
			t.Errorf("redis: %s not from a Secret", env)
			continue
		}
		for _, d := range m.byComponent(user) {
			dc := &d.Spec.Template.Spec.Containers[0]
			pw := envVar(dc, "ACTLOOP_REDIS_PASSWORD")
			if envValue(dc, "ACTLOOP_REDIS_USERNAME") != user || pw == nil || pw.ValueFrom == nil ||
				!reflect.DeepEqual(pw.ValueFrom.SecretKeyRef, ref.ValueFrom.SecretKeyRef) {
				t.Errorf("Deployment %s: want Redis user %s with the password of Redis's %s", d.Name, user, env)
			}
		}
	}
}

// checkAllContainers: every container of every workload requests CPU and
// memory and has liveness and readiness probes; every pod runs as non-root.
func checkAllContainers(t reporter, m *manifests) {
	t.Helper()
	type pod struct {
		at   string
		spec *corev1.PodSpec
	}
	var pods []pod
	for _, d := range m.deployments {
		pods = append(pods, pod{"Deployment " + d.Name, &d.Spec.Template.Spec})
	}
	for _, s := range m.statefulSets {
		pods = append(pods, pod{"StatefulSet " + s.Name, &s.Spec.Template.Spec})
	}
	for _, p := range pods {
		if sc := p.spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: want runAsNonRoot", p.at)
		}
		for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				q, ok := c.Resources.Requests[r]
				if !ok || q.Cmp(resource.Quantity{}) <= 0 {
					t.Errorf("%s: container %s: no %s request", p.at, c.Name, r)
				}
			}
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				t.Errorf("%s: container %s: want liveness and readiness probes", p.at, c.Name)
			}
		}
	}
}

// Values that cannot work fail rendering with a message naming the value.
func TestChartRejects(t *testing.T) {
	group := func(kv ...any) map[string]any {
		g := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			g[kv[i].(string)] = kv[i+1]
		}
		return g
	}
	groups := func(gs ...map[string]any) map[string]any {
		list := make([]any, len(gs))
		for i, g := range gs {
			list[i] = g
		}
		return map[string]any{"genWorker": map[string]any{"groups": list}}
	}
	// external is an external NATS with the extra nats values kv.
	external := func(kv map[string]any) map[string]any {
		n := map[string]any{"bundled": false, "url": "nats://n:4222"}
		maps.Copy(n, kv)
		return map[string]any{"nats": n}
	}
	with := func(vals map[string]any, k string, v any) map[string]any {
		vals[k] = v
		return vals
	}
	tests := []struct {
		name    string
		vals    map[string]any
		wantErr string
	}{
		{"group without url", groups(group("name", "r0")), "genWorker.groups[0] (r0): url is required"},
		{"group without name", groups(group("url", "http://a:1")), "genWorker.groups[0]: name is required"},
		{"duplicate replica", groups(group("name", "a", "replica", "r0", "url", "http://a:1"), group("name", "b", "replica", "r0", "url", "http://b:1")),
			`genWorker.groups[1] (b): replica name "r0" is used by two groups`},
		{"duplicate replica by default", groups(group("name", "r0", "url", "http://a:1"), group("name", "b", "replica", "r0", "url", "http://b:1")),
			`replica name "r0" is used by two groups`},
		{"duplicate group", groups(group("name", "a", "url", "http://a:1"), group("name", "a", "replica", "r1", "url", "http://b:1")),
			`genWorker.groups[1] (a): group name "a" is used by two groups`},
		{"bad replica", groups(group("name", "a", "replica", "r.0", "url", "http://a:1")), `replica "r.0" is not a valid replica name`},
		{"reserved replica", groups(group("name", "start", "url", "http://a:1")), `replica "start" is not a valid replica name`},
		{"bad group name", groups(group("name", "R0", "url", "http://a:1")), `name "R0" is not a DNS label`},
		{"bad api", groups(group("name", "a", "url", "http://a:1", "api", "tgi")), `genWorker.groups[0] (a): api "tgi": want sglang or openai`},
		{"bad url", groups(group("name", "a", "url", "a:1")), `url "a:1": want http(s)://host[:port]`},
		{"no slots", groups(group("name", "a", "url", "http://a:1", "slots", -1)), "slots must be >= 1"},
		{"no groups", map[string]any{"genWorker": map[string]any{"groups": []any{}}}, "genWorker.groups: at least one gen-worker group"},
		{"external nats without url", map[string]any{"nats": map[string]any{"bundled": false}}, "nats.url is required when nats.bundled is false"},
		{"external redis without url", map[string]any{"redis": map[string]any{"bundled": false}}, "redis.url is required when redis.bundled is false"},
		{"two nats servers", map[string]any{"nats": map[string]any{"replicas": 2}}, "nats.replicas: 2"},
		{"too many stream replicas", map[string]any{"nats": map[string]any{"streamReplicas": 5}}, "nats.streamReplicas: 5 is more than the 3 bundled servers"},
		{"bad sync interval", map[string]any{"nats": map[string]any{"syncInterval": "often"}}, `nats.syncInterval: "often"`},
		{"bad appendfsync", map[string]any{"redis": map[string]any{"appendfsync": "sometimes"}}, `redis.appendfsync: "sometimes"`},
		{"bad policy", map[string]any{"coordinator": map[string]any{"policy": "random"}}, `coordinator.policy: "random"`},
		{"keda on external nats without endpoint", map[string]any{
			"nats":      map[string]any{"bundled": false, "url": "nats://n:4222"},
			"envWorker": map[string]any{"keda": map[string]any{"enabled": true}},
		}, "envWorker.keda.monitoringEndpoint"},
		{"http predictor without url", map[string]any{"predictorGw": map[string]any{"backend": "http"}}, "predictorGw.url is required"},
		{"extraEnv without name", map[string]any{"coordinator": map[string]any{"extraEnv": []any{map[string]any{"value": "x"}}}}, "coordinator.extraEnv"},
		{"creds and nkey", external(map[string]any{"credsSecret": "a", "nkeySecret": "b"}),
			"nats.credsSecret and nats.nkeySecret: set at most one NATS authentication"},
		{"a component's creds and nkey", with(external(nil), "coordinator", map[string]any{"natsCredsSecret": "a", "natsNkeySecret": "b"}),
			"coordinator.natsCredsSecret and coordinator.natsNkeySecret: set at most one"},
		{"a group's creds and nkey", with(external(nil), "genWorker", groups(group("name", "r0", "url", "http://a:1", "natsCredsSecret", "a", "natsNkeySecret", "b"))["genWorker"]),
			"genWorker.groups[0].natsCredsSecret and genWorker.groups[0].natsNkeySecret: set at most one"},
		{"creds on the bundled NATS", map[string]any{"nats": map[string]any{"credsSecret": "a"}},
			"nats.credsSecret: a .creds or nkey file is for an external NATS"},
		{"an nkey and credentials in the URL", with(map[string]any{"nats": map[string]any{"bundled": false, "url": "nats://u:p@n:4222"}},
			"predictorGw", map[string]any{"natsNkeySecret": "a"}), "predictorGw.natsNkeySecret: nats.url carries credentials too"},
		{"the gateway's creds on the bundled NATS", map[string]any{"gateway": map[string]any{"natsCredsSecret": "a"}},
			"gateway.natsCredsSecret: a .creds or nkey file is for an external NATS"},
		{"a gateway variable without a name", map[string]any{"gateway": map[string]any{"extraEnv": []any{map[string]any{"value": "x"}}}},
			"gateway.extraEnv"},
		{"a client certificate without its key", external(map[string]any{"tls": map[string]any{"secret": "s", "clientCert": "tls.crt"}}),
			"nats.tls.clientCert is set without nats.tls.clientKey"},
		{"a Redis client key without its certificate", map[string]any{"redis": map[string]any{"bundled": false, "url": "rediss://r:6379/0",
			"tls": map[string]any{"secret": "s", "clientKey": "tls.key"}}}, "redis.tls.clientKey is set without redis.tls.clientCert"},
		{"a client certificate from no Secret", external(map[string]any{"tls": map[string]any{"clientCert": "tls.crt", "clientKey": "tls.key"}}),
			"nats.tls.clientCert: name the Secret"},
		{"client TLS to the bundled NATS", map[string]any{"nats": map[string]any{"tls": map[string]any{"secret": "s"}}},
			"nats.tls.secret: for an external server (nats.bundled: false); the bundled one's TLS is nats.serverTLS"},
		{"client TLS to the bundled Redis", map[string]any{"redis": map[string]any{"tls": map[string]any{"secret": "s"}}},
			"redis.tls.secret: for an external server (redis.bundled: false); the bundled one's TLS is redis.serverTLS"},
		{"server TLS for an external NATS", external(map[string]any{"serverTLS": map[string]any{"enabled": true}}),
			"nats.serverTLS.enabled: for the bundled server"},
		{"a certificate valid for no day", map[string]any{"redis": map[string]any{"serverTLS": map[string]any{"enabled": true, "days": 0}}},
			"redis.serverTLS.days: 0"},
		{"a TLS Secret with nothing to mount", external(map[string]any{"tls": map[string]any{"secret": "s", "ca": ""}}),
			"nats.tls.secret: set nats.tls.ca"},
		{"Redis TLS over a socket", map[string]any{"redis": map[string]any{"bundled": false, "url": "unix:///run/redis.sock",
			"tls": map[string]any{"secret": "s"}}}, "redis.tls.secret: TLS needs a redis:// or rediss:// URL"},
		{"the CLI as a service's user", map[string]any{"nats": map[string]any{"auth": map[string]any{
			"enabled": true, "password": "p", "servicePasswordSeed": "s", "user": "gen-worker-r0"}}},
			`nats.auth.user: "gen-worker-r0" is the user of a service`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := render(t, tt.vals)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), "actloop: ") {
				t.Errorf("%v: want the chart's own message", err)
			}
		})
	}
}

// helm lint passes for every values file.
func TestChartLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range valueFiles(t) {
		t.Run(name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, vals, namespace, kv)
			for _, msg := range l.Messages {
				if msg.Severity >= support.WarningSev {
					t.Errorf("lint: %s", msg)
				} else {
					t.Logf("lint: %s", msg)
				}
			}
		})
	}
}

// The services start insecure (ACTLOOP_INSECURE, which each logs as an
// error) only where the release leaves them unauthenticated: every service
// with a bundled NATS or Redis without auth, the coordinator and the
// gateway also without an API token, which comes from a Secret.
func TestChartInsecureOnlyWhenUnauthenticated(t *testing.T) {
	authOn := map[string]any{
		"nats":  map[string]any{"auth": map[string]any{"enabled": true, "password": "pw", "servicePasswordSeed": "seed"}},
		"redis": map[string]any{"auth": map[string]any{"enabled": true, "password": "pw"}},
	}
	withToken := map[string]any{"nats": authOn["nats"], "redis": authOn["redis"],
		"coordinator": map[string]any{"apiTokenSecret": map[string]any{"name": "api", "key": "token"}}}
	tests := []struct {
		name     string
		vals     map[string]any
		insecure func(component string) bool
	}{
		{"no auth", map[string]any{"nats": map[string]any{"auth": map[string]any{"enabled": false}},
			"redis": map[string]any{"auth": map[string]any{"enabled": false}}}, func(string) bool { return true }},
		{"defaults: auth, no token", nil, func(c string) bool { return c == "coordinator" || c == "gateway" }},
		{"auth, no token", authOn, func(c string) bool { return c == "coordinator" || c == "gateway" }},
		{"auth and a token", withToken, func(string) bool { return false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, _, err := render(t, tt.vals)
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, files)
			for _, d := range m.deployments {
				comp := d.Spec.Template.Labels[componentLabel]
				c := &d.Spec.Template.Spec.Containers[0]
				if got := envValue(c, "ACTLOOP_INSECURE") == "true"; got != tt.insecure(comp) {
					t.Errorf("%s: ACTLOOP_INSECURE=true %v, want %v", d.Name, got, tt.insecure(comp))
				}
				if comp != "coordinator" || tt.vals == nil || tt.name != "auth and a token" {
					continue
				}
				tok := envVar(c, "ACTLOOP_API_TOKEN")
				if tok == nil || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil ||
					tok.ValueFrom.SecretKeyRef.Name != "api" || tok.ValueFrom.SecretKeyRef.Key != "token" {
					t.Errorf("%s: ACTLOOP_API_TOKEN: %+v, want Secret api's key token", d.Name, tok)
				}
			}
		})
	}
}

// By default the bundled NATS and Redis want passwords the chart makes: in
// its Secret, each service's NATS password its own.
func TestChartGeneratesPasswords(t *testing.T) {
	files, _, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, files)
	var sec *corev1.Secret
	for _, s := range m.secrets {
		if strings.HasSuffix(s.Name, "actloop") || s.Labels[componentLabel] == "secrets" {
			sec = s
		}
	}
	if sec == nil {
		t.Fatal("no chart Secret")
	}
	seen := map[string]string{}
	for _, k := range []string{"nats-password", "nats-password-seed", "redis-password", "nats-password-coordinator", "nats-password-gen-worker-r0"} {
		v := sec.StringData[k]
		if len(v) < 20 {
			t.Errorf("Secret %s: %s: %q, want a generated password", sec.Name, k, v)
		}
		if other, ok := seen[v]; ok {
			t.Errorf("Secret %s: %s and %s are the same", sec.Name, k, other)
		}
		seen[v] = k
	}
}

// generated matches what differs between renderings of one release: the
// passwords the chart makes (ensureSecrets), the services' passwords
// derived from a made seed, and the checksums of the passwords and the
// Secret. (An upgrade keeps them: the chart reads them back from its Secret.)
var generated = regexp.MustCompile(`\bp[A-Za-z0-9]{31}\b|\bp[0-9a-f]{64}\b|checksum/(passwords|secret|tls): [0-9a-f]{64}|LS0tLS1CRUdJTi[A-Za-z0-9+/=]*`)

// maskGenerated is files with what generated matches left out.
func maskGenerated(files map[string]string) map[string]string {
	out := make(map[string]string, len(files))
	for k, v := range files {
		out[k] = generated.ReplaceAllString(v, "<generated>")
	}
	return out
}

// The bundled Redis's rendered command line, run by redis-server, without
// and with TLS (the chart's certificate): each service logs in with the
// password its Deployment is given, over TLS checking the certificate
// against the CA it is given for its URL's host, and may touch its own
// keys only; the default user is the administrators'.
func TestBundledRedisOnRedisServer(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH (CI installs it)")
	}
	for name, vals := range map[string]map[string]any{
		"plain": nil,
		"tls":   {"redis": map[string]any{"serverTLS": map[string]any{"enabled": true}}},
	} {
		t.Run(name, func(t *testing.T) {
			files, values, err := render(t, vals)
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, files)
			c := container(t, &m.statefulSet(release+"-actloop-redis").Spec.Template.Spec, "redis")
			if c == nil {
				return
			}
			tlsConf := serverTLSClient(t, m, "redis")
			// Kubernetes's $(VAR) expansion of the args, from the
			// container's Secret-backed variables; the data directory,
			// port and TLS files are the test's.
			vars := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					vars[e.Name] = secretValue(m, e.ValueFrom.SecretKeyRef)
				}
			}
			dir := t.TempDir()
			port := testkit.FreePort(t)
			expand := regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`)
			var args []string
			for i := 0; i < len(c.Args); i++ {
				switch a := c.Args[i]; {
				case a == "--dir":
					i++
				case a == "--tls-port":
					args = append(args, a, fmt.Sprint(port))
					i++
				case strings.HasPrefix(a, "/etc/redis/tls/"):
					args = append(args, writeSecretFile(t, m, dir, serverTLSSecret(t, values, "redis"), strings.TrimPrefix(a, "/etc/redis/tls/")))
				default:
					args = append(args, expand.ReplaceAllStringFunc(a, func(v string) string { return vars[v[2:len(v)-1]] }))
				}
			}
			if tlsConf == nil {
				args = append(args, "--port", fmt.Sprint(port))
			}
			cmd := exec.Command(bin, append(args, "--dir", dir, "--bind", "127.0.0.1")...)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			admin := redis.NewClient(&redis.Options{Addr: addr, Password: vars["REDIS_PASSWORD"], TLSConfig: tlsConf})
			defer admin.Close()
			for admin.Ping(ctx).Err() != nil {
				select {
				case <-ctx.Done():
					t.Fatalf("redis-server with the chart's args did not answer: %s", out.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			if tlsConf != nil {
				plain := redis.NewClient(&redis.Options{Addr: addr, Password: vars["REDIS_PASSWORD"], MaxRetries: -1})
				if err := plain.Ping(ctx).Err(); err == nil {
					t.Error("redis: answered without TLS")
				}
				_ = plain.Close()
			}
			for user, keys := range service.RedisTable {
				d := m.byComponent(user)
				if len(d) == 0 {
					t.Errorf("no Deployment of %s", user)
					continue
				}
				dc := &d[0].Spec.Template.Spec.Containers[0]
				pw := secretValue(m, envVar(dc, "ACTLOOP_REDIS_PASSWORD").ValueFrom.SecretKeyRef)
				rc := redis.NewClient(&redis.Options{Addr: addr, Username: envValue(dc, "ACTLOOP_REDIS_USERNAME"), Password: pw, TLSConfig: tlsConf})
				own := strings.ReplaceAll(keys[0], "*", "x")
				if err := rc.Set(ctx, own, "1", 0).Err(); err != nil {
					t.Errorf("%s: SET %s: %v", user, own, err)
				}
				if err := rc.Set(ctx, "elsewhere", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
					t.Errorf("%s: SET elsewhere: %v, want NOPERM", user, err)
				}
				if err := rc.FlushAll(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
					t.Errorf("%s: FLUSHALL: %v, want NOPERM", user, err)
				}
				_ = rc.Close()
			}
		})
	}
}

// The bundled NATS's rendered configuration with TLS (the chart's
// certificate), run by nats-server (one server, its routes and JetStream
// left out): a service logs in over TLS, checking the certificate against
// the CA it is given for its URL's host; a client without TLS or trusting
// another CA is refused.
func TestBundledNATSTLSOnNATSServer(t *testing.T) {
	files, vals, err := render(t, map[string]any{"nats": map[string]any{"serverTLS": map[string]any{"enabled": true}}})
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, files)
	name := release + "-actloop-nats"
	c := container(t, &m.statefulSet(name).Spec.Template.Spec, "nats")
	if c == nil {
		return
	}
	dir := t.TempDir()
	conf := m.configMap(name).Data["nats.conf"]
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		conf = strings.ReplaceAll(conf, "/etc/nats/tls/"+k, writeSecretFile(t, m, dir, serverTLSSecret(t, vals, "nats"), k))
	}
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAME", name+"-0")
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Setenv(e.Name, secretValue(m, e.ValueFrom.SecretKeyRef))
		}
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.Cluster, opts.Routes, opts.JetStream = server.ClusterOpts{}, nil, false
	opts.PidFile, opts.NoSigs = "", true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(time.Minute) {
		t.Fatal("nats-server with the chart's configuration is not ready")
	}
	url := srv.ClientURL()
	d := m.byComponent("coordinator")[0]
	dc := &d.Spec.Template.Spec.Containers[0]
	user := nats.UserInfo(envValue(dc, "ACTLOOP_NATS_USER"), secretValue(m, envVar(dc, "ACTLOOP_NATS_PASSWORD").ValueFrom.SecretKeyRef))
	nc, err := nats.Connect(url, user, nats.Secure(serverTLSClient(t, m, "nats")))
	if err != nil {
		t.Fatalf("the coordinator over TLS: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(url, user); err == nil {
		nc.Close()
		t.Error("connected without TLS")
	}
	// The CLI through kubectl port-forward, as NOTES.txt says: actloop's own
	// client, the chart's CA, 127.0.0.1.
	cli := service.CommonDefaults()
	cli.NATSURL = strings.Replace(url, "nats://", "tls://", 1)
	cli.NATSUser, cli.NATSPassword = stringValue(t, vals, "nats.auth.user"), os.Getenv("NATS_PASSWORD")
	cli.NATSTLSCA = writeSecretFile(t, m, t.TempDir(), serverTLSSecret(t, vals, "nats"), "ca.crt")
	if nc, err := cli.ConnectNATS("cli"); err != nil {
		t.Errorf("the CLI over TLS to 127.0.0.1: %v", err)
	} else {
		nc.Close()
	}
	other := selfSigned(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(other["ca.crt"])
	if nc, err := nats.Connect(url, user, nats.Secure(&tls.Config{RootCAs: pool, ServerName: serverTLSClient(t, m, "nats").ServerName, MinVersion: tls.VersionTLS12})); err == nil {
		nc.Close()
		t.Error("connected trusting another CA")
	}
}

// serverTLSClient is the TLS a service's client of bundled server s uses
// when it serves TLS: the CA of the chart's certificate and its URL's host
// (nil without TLS).
func serverTLSClient(t *testing.T, m *manifests, s string) *tls.Config {
	t.Helper()
	sec := m.secret(release + "-actloop-" + s + "-tls")
	if sec == nil {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		t.Fatalf("%s: no CA", sec.Name)
	}
	u := m.secret(release + "-actloop").StringData[s+"-url"]
	return &tls.Config{RootCAs: pool, ServerName: urlHost(u), MinVersion: tls.VersionTLS12}
}

// urlHost is the host of a server's URL ("" when it does not parse).
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// writeSecretFile writes key of the chart's Secret name into dir and
// returns its path.
func writeSecretFile(t *testing.T, m *manifests, dir, name, key string) string {
	t.Helper()
	sec := m.secret(name)
	if sec == nil {
		t.Fatalf("no Secret %s", name)
	}
	path := filepath.Join(dir, key)
	if err := os.WriteFile(path, sec.Data[key], 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// selfSigned is a throwaway certificate, its key and itself as the CA, as a
// kubernetes.io/tls Secret's data.
func selfSigned(t reporter) map[string][]byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stand-in"}, DNSNames: []string{"stand-in"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return map[string][]byte{"tls.crt": cert, "ca.crt": cert, "tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}
}

// Adding an inference replica (a gen-worker group) is a helm upgrade that
// leaves every other pod as it was: the coordinator is not told the
// replicas (they join by heartbeat) and no pod but the new group's, and
// the bundled NATS servers' (its user), carries anything of the new group,
// its password in the chart's Secret included.
func TestAddingAGroupRestartsNoOtherPod(t *testing.T) {
	base := valueFiles(t)["bundled-values.yaml"]
	if base == nil {
		t.Fatal("no ci/bundled-values.yaml")
	}
	before, _, err := render(t, base)
	if err != nil {
		t.Fatal(err)
	}
	more := map[string]any{}
	maps.Copy(more, base)
	gw := map[string]any{}
	maps.Copy(gw, base["genWorker"].(map[string]any))
	gw["groups"] = append(slices.Clone(gw["groups"].([]any)), map[string]any{"name": "r9", "url": "http://sglang-r9.inference:30000"})
	more["genWorker"] = gw
	after, _, err := render(t, more)
	if err != nil {
		t.Fatal(err)
	}
	podTemplates := func(files map[string]string) map[string]string {
		out := map[string]string{}
		m := decode(t, files)
		for _, d := range m.deployments {
			b, err := json.Marshal(d.Spec.Template)
			if err != nil {
				t.Fatal(err)
			}
			out[d.Name] = string(b)
		}
		return out
	}
	was, now := podTemplates(before), podTemplates(after)
	if _, ok := now[release+"-actloop-gen-worker-r9"]; !ok {
		t.Fatalf("no Deployment for the new group: %v", slices.Sorted(maps.Keys(now)))
	}
	for name, tmpl := range was {
		if now[name] != tmpl {
			t.Errorf("Deployment %s: its pod template changed with a new group (its pods would restart)", name)
		}
	}
	// A password of its own that changes still restarts a pod.
	reseeded := map[string]any{}
	maps.Copy(reseeded, base)
	n := map[string]any{}
	maps.Copy(n, base["nats"].(map[string]any))
	a := map[string]any{}
	maps.Copy(a, n["auth"].(map[string]any))
	a["servicePasswordSeed"] = "another-seed"
	n["auth"], reseeded["nats"] = a, n
	files, _, err := render(t, reseeded)
	if err != nil {
		t.Fatal(err)
	}
	again := podTemplates(files)
	for _, name := range []string{release + "-actloop-coordinator", release + "-actloop-gen-worker-r0"} {
		if again[name] == was[name] {
			t.Errorf("Deployment %s: its pod template did not change with its NATS password", name)
		}
	}
}
