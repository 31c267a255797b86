package deploy

import (
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
)

// The workers' model settings follow model.*: ACTLOOP_MODEL_DIR,
// ACTLOOP_TOKENIZER and ACTLOOP_CHAT_TEMPLATE each only when set, and
// model.volume mounted read-only at model.dir in gen- and env-worker pods
// (and nowhere else); some values file sets a model directory.
func TestChartModelSettings(t *testing.T) {
	covered := false
	for name, vals := range valueFiles(t) {
		files, v, err := render(t, vals)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := decode(t, files)
		dir := stringValue(t, v, "model.dir")
		hasVolume := false
		if mv, err := v.Table("model"); err == nil {
			switch vol := mv["volume"].(type) {
			case map[string]any:
				hasVolume = len(vol) > 0
			case chartutil.Values:
				hasVolume = len(vol) > 0
			}
		}
		covered = covered || dir != "" && hasVolume
		for _, d := range m.deployments {
			component := d.Spec.Template.Labels["app.kubernetes.io/component"]
			worker := component == "gen-worker" || component == "env-worker"
			c := container(t, &d.Spec.Template.Spec, component)
			if c == nil {
				continue
			}
			for setting, path := range map[string]string{"ACTLOOP_MODEL_DIR": "model.dir",
				"ACTLOOP_TOKENIZER": "model.tokenizer", "ACTLOOP_CHAT_TEMPLATE": "model.chatTemplate"} {
				want := stringValue(t, v, path)
				if !worker {
					want = ""
				}
				if got := envVar(c, setting); (got == nil) != (want == "") || got != nil && got.Value != want {
					t.Errorf("%s: %s: %s %v, want %q (set only when %s is)", name, d.Name, setting, got, want, path)
				}
			}
			mounted := modelMounted(d, c.Name, dir)
			if want := worker && dir != "" && hasVolume; mounted != want {
				t.Errorf("%s: %s: model volume mounted read-only at %q: %v, want %v", name, d.Name, dir, mounted, want)
			}
		}
	}
	if !covered {
		t.Error("no values file sets model.dir and model.volume")
	}
}

// modelMounted reports whether d's container mounts the volume "model"
// read-only at dir, and the pod has it.
func modelMounted(d *appsv1.Deployment, container, dir string) bool {
	spec := &d.Spec.Template.Spec
	hasVolume := false
	for _, v := range spec.Volumes {
		hasVolume = hasVolume || v.Name == "model"
	}
	for _, c := range spec.Containers {
		if c.Name != container {
			continue
		}
		for _, vm := range c.VolumeMounts {
			if vm.Name == "model" {
				return hasVolume && vm.MountPath == dir && vm.ReadOnly
			}
		}
	}
	return false
}
