package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// renderDecoded renders the chart with vals and decodes it.
func renderDecoded(t *testing.T, vals map[string]any) *manifests {
	t.Helper()
	files, _, err := render(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, files)
}

// httpPort is the container's port named http.
func httpPort(c *corev1.Container) int32 {
	for _, p := range c.Ports {
		if p.Name == "http" {
			return p.ContainerPort
		}
	}
	return 0
}

// actloopComponents are the components of the actloop Deployments of m.
func actloopComponents(m *manifests) []string {
	var out []string
	for _, d := range m.deployments {
		if c := d.Spec.Template.Labels[componentLabel]; !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// By default: the gateway runs, every actloop pod carries the
// prometheus.io annotations of its http port, no ServiceMonitor is
// rendered and no OTEL_ variable is set; metrics.podAnnotations false
// drops the annotations.
func TestChartObservabilityDefaults(t *testing.T) {
	m := renderDecoded(t, nil)
	if got, want := actloopComponents(m), []string{"coordinator", "env-worker", "gateway", "gen-worker", "predictor-gw"}; !slices.Equal(got, want) {
		t.Errorf("components %v, want %v", got, want)
	}
	if len(m.monitors) != 0 {
		t.Errorf("%d ServiceMonitors by default, want none (metrics.serviceMonitor.enabled is false)", len(m.monitors))
	}
	for _, d := range m.deployments {
		c := &d.Spec.Template.Spec.Containers[0]
		a := d.Spec.Template.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/port"] != fmt.Sprint(httpPort(c)) {
			t.Errorf("Deployment %s: annotations %v: want prometheus.io/scrape true, path /metrics, port %d", d.Name, a, httpPort(c))
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "OTEL_") || e.Name == "ACTLOOP_OTEL_EXPORTER" {
				t.Errorf("Deployment %s: %s set with otel off", d.Name, e.Name)
			}
		}
	}
	m = renderDecoded(t, map[string]any{"metrics": map[string]any{"podAnnotations": false}})
	for _, d := range m.deployments {
		for k := range d.Spec.Template.Annotations {
			if strings.HasPrefix(k, "prometheus.io/") {
				t.Errorf("Deployment %s: %s with metrics.podAnnotations false", d.Name, k)
			}
		}
	}
}

// With metrics.serviceMonitor.enabled, each actloop component has a
// ServiceMonitor with the values' labels and interval, scraping /metrics on
// the http port of exactly one Service of its namespace, which selects
// that component's pods and only those, and targets their http port.
func TestChartServiceMonitors(t *testing.T) {
	m := renderDecoded(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{
		"enabled": true, "interval": "15s", "scrapeTimeout": "10s", "labels": map[string]any{"release": "kube-prometheus-stack"}}}})
	want := actloopComponents(m)
	var got []string
	for _, sm := range m.monitors {
		at := "ServiceMonitor " + sm.GetName()
		comp := sm.GetLabels()[componentLabel]
		got = append(got, comp)
		if sm.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("%s: labels %v: want metrics.serviceMonitor.labels", at, sm.GetLabels())
		}
		if ns, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames"); !slices.Equal(ns, []string{namespace}) {
			t.Errorf("%s: namespaceSelector %v, want [%s]", at, ns, namespace)
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Errorf("%s: %d endpoints, want 1", at, len(eps))
			continue
		}
		ep, _ := eps[0].(map[string]any)
		if ep["port"] != "http" || ep["path"] != "/metrics" || ep["interval"] != "15s" || ep["scrapeTimeout"] != "10s" {
			t.Errorf("%s: endpoint %v: want port http, path /metrics, interval 15s, scrapeTimeout 10s", at, ep)
		}
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		var selected []*corev1.Service
		for _, s := range m.services {
			if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(s.Labels)) {
				selected = append(selected, s)
			}
		}
		if len(selected) != 1 {
			t.Errorf("%s: selects %d Services, want 1", at, len(selected))
			continue
		}
		svc := selected[0]
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" && p.TargetPort.String() == "http" }) {
			t.Errorf("%s: Service %s has no port http to the pods' http port: %+v", at, svc.Name, svc.Spec.Ports)
		}
		for _, d := range m.deployments {
			mine := d.Spec.Template.Labels[componentLabel] == comp
			if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) != mine {
				t.Errorf("%s: Service %s selector %v: Deployment %s (component %s) selected %v", at, svc.Name, svc.Spec.Selector,
					d.Name, d.Spec.Template.Labels[componentLabel], !mine)
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("ServiceMonitors for %v, want one for each of %v", got, want)
	}
	// Without the gateway, none for it.
	m = renderDecoded(t, map[string]any{"gateway": map[string]any{"enabled": false},
		"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}})
	for _, sm := range m.monitors {
		if sm.GetLabels()[componentLabel] == "gateway" {
			t.Errorf("ServiceMonitor %s with gateway.enabled false", sm.GetName())
		}
	}
}

// otel.* become the standard OTEL_ variables of every actloop container,
// the headers from the Secret named, each component its service name.
func TestChartOpenTelemetry(t *testing.T) {
	m := renderDecoded(t, map[string]any{"otel": map[string]any{
		"tracesExporter": "otlp", "endpoint": "http://collector.obs:4318", "protocol": "http/protobuf",
		"headersSecret":      map[string]any{"name": "otel-auth", "key": "hdrs"},
		"resourceAttributes": "deployment.environment=prod", "sampler": "parentbased_traceidratio", "samplerArg": "0.25"}})
	for _, d := range m.deployments {
		c := &d.Spec.Template.Spec.Containers[0]
		comp := d.Spec.Template.Labels[componentLabel]
		for k, want := range map[string]string{
			"OTEL_SERVICE_NAME": "actloop-" + comp, "OTEL_TRACES_EXPORTER": "otlp",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.obs:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
			"OTEL_TRACES_SAMPLER_ARG": "0.25",
		} {
			if got := envValue(c, k); got != want {
				t.Errorf("Deployment %s: %s %q, want %q", d.Name, k, got, want)
			}
		}
		h := envVar(c, "OTEL_EXPORTER_OTLP_HEADERS")
		if h == nil || h.Value != "" || h.ValueFrom == nil || h.ValueFrom.SecretKeyRef == nil ||
			h.ValueFrom.SecretKeyRef.Name != "otel-auth" || h.ValueFrom.SecretKeyRef.Key != "hdrs" {
			t.Errorf("Deployment %s: OTEL_EXPORTER_OTLP_HEADERS %+v: want Secret otel-auth key hdrs", d.Name, h)
		}
	}
	// Only the exporter: only it and the service name.
	m = renderDecoded(t, map[string]any{"otel": map[string]any{"tracesExporter": "console"}})
	for _, d := range m.deployments {
		var set []string
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "OTEL_") {
				set = append(set, e.Name)
			}
		}
		slices.Sort(set)
		if !slices.Equal(set, []string{"OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER"}) {
			t.Errorf("Deployment %s: %v, want only OTEL_SERVICE_NAME and OTEL_TRACES_EXPORTER", d.Name, set)
		}
	}
}

// The gateway: a Deployment and a Service; the coordinator's URL and
// token; no Redis; a NetworkPolicy that admits only
// networkPolicy.gatewayClients on its port and lets it out only to DNS,
// NATS and the coordinator's port; the bundled NATS admits it, the bundled
// Redis does not. gateway.enabled false renders none of it.
func TestChartGateway(t *testing.T) {
	clients := []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"role": "trainer"}}}}
	m := renderDecoded(t, map[string]any{
		"networkPolicy": map[string]any{"gatewayClients": clients},
		"coordinator":   map[string]any{"apiTokenSecret": map[string]any{"name": "api", "key": "token"}},
		"gateway":       map[string]any{"maxWait": "2m", "maxBatch": 64},
	})
	name := release + "-actloop-gateway"
	d := m.deployment(t, name)
	if d == nil {
		return
	}
	if m.service(name) == nil {
		t.Errorf("no Service %s", name)
	}
	c := &d.Spec.Template.Spec.Containers[0]
	coordPort := httpPort(&m.deployment(t, release+"-actloop-coordinator").Spec.Template.Spec.Containers[0])
	for k, want := range map[string]string{
		"ACTLOOP_COORDINATOR_URL":  fmt.Sprintf("http://%s-actloop-coordinator:%d", release, coordPort),
		"ACTLOOP_GATEWAY_MAX_WAIT": "2m", "ACTLOOP_GATEWAY_MAX_BATCH": "64", "ACTLOOP_NATS_USER": "gateway",
	} {
		if got := envValue(c, k); got != want {
			t.Errorf("gateway: %s %q, want %q", k, got, want)
		}
	}
	if tok := envVar(c, "ACTLOOP_API_TOKEN"); tok == nil || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil ||
		tok.ValueFrom.SecretKeyRef.Name != "api" || tok.ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("gateway: ACTLOOP_API_TOKEN %+v: want coordinator.apiTokenSecret", tok)
	}
	if envVar(c, "ACTLOOP_INSECURE") != nil {
		t.Errorf("gateway: ACTLOOP_INSECURE with a token and authenticated servers")
	}

	var np *networkingv1.NetworkPolicy
	for _, p := range m.netpols {
		if p.Spec.PodSelector.MatchLabels[componentLabel] == "gateway" {
			np = p
		}
	}
	if np == nil {
		t.Fatal("no NetworkPolicy selects the gateway")
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 ||
		np.Spec.Ingress[0].From[0].PodSelector == nil || np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["role"] != "trainer" ||
		len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntVal != httpPort(c) {
		t.Errorf("gateway NetworkPolicy: ingress %+v: want only networkPolicy.gatewayClients, on port %d", np.Spec.Ingress, httpPort(c))
	}
	var out []string // component:port
	for _, r := range np.Spec.Egress {
		to := "any"
		if len(r.To) == 1 && r.To[0].PodSelector != nil {
			to = r.To[0].PodSelector.MatchLabels[componentLabel]
		}
		for _, p := range r.Ports {
			out = append(out, fmt.Sprintf("%s:%d", to, p.Port.IntVal))
		}
	}
	slices.Sort(out)
	if want := []string{"any:53", "any:53", fmt.Sprintf("coordinator:%d", coordPort), "nats:4222"}; !slices.Equal(out, want) {
		t.Errorf("gateway NetworkPolicy: egress %v, want %v", out, want)
	}
	admits := func(component, server string) bool {
		for _, p := range m.netpols {
			if p.Spec.PodSelector.MatchLabels[componentLabel] != server {
				continue
			}
			for _, r := range p.Spec.Ingress {
				for _, f := range r.From {
					if f.PodSelector == nil {
						continue
					}
					for _, e := range f.PodSelector.MatchExpressions {
						if e.Key == componentLabel && slices.Contains(e.Values, component) {
							return true
						}
					}
				}
			}
		}
		return false
	}
	if !admits("gateway", "nats") || admits("gateway", "redis") {
		t.Errorf("the bundled NATS admits the gateway: %v, Redis: %v; want NATS only", admits("gateway", "nats"), admits("gateway", "redis"))
	}

	m = renderDecoded(t, map[string]any{"gateway": map[string]any{"enabled": false}})
	for k := range m.names {
		if strings.HasSuffix(k, "/"+name) {
			t.Errorf("%s with gateway.enabled false", k)
		}
	}
	if cm := m.configMap(release + "-actloop-nats"); cm != nil && strings.Contains(cm.Data["nats.conf"], "NATS_PASSWORD_GATEWAY") {
		t.Errorf("nats.conf: a gateway user with gateway.enabled false")
	}
}
