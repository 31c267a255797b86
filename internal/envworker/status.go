package envworker

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/actloop/actloop/internal/service"
)

// Status is what GET /v1/status on the worker's address says about how its
// sandboxes are run and bounded.
type Status struct {
	Worker  string `json:"worker"`
	Backend string `json:"backend"`
	// The local backend's: its isolation (bwrap or none), its cgroups
	// ("" for none), and how its disk and file limits are enforced (tmpfs
	// or watch) with why not tmpfs.
	Isolation string `json:"isolation,omitempty"`
	Cgroups   string `json:"cgroups,omitempty"`
	Disk      string `json:"disk,omitempty"`
	DiskError string `json:"disk_error,omitempty"`
	DiskMB    int    `json:"disk_mb"`
	Files     int    `json:"files"`
}

// Status returns the worker's status.
func (w *Worker) Status() Status {
	st := Status{Worker: w.cfg.ID, Backend: w.cfg.SandboxBackend, DiskMB: w.cfg.DiskMB, Files: w.cfg.Files}
	if l := w.local; l != nil {
		st.Isolation, st.Cgroups, st.Disk = l.Isolation(), l.Cgroups(), l.Disk()
		if err := l.DiskError(); err != nil {
			st.DiskError = err.Error()
		}
	}
	return st
}

// mux serves the health endpoints, /metrics and GET /v1/status.
func (w *Worker) mux() *http.ServeMux {
	mux := service.HealthMux(w.d)
	mux.HandleFunc("GET /v1/status", func(rw http.ResponseWriter, _ *http.Request) {
		b, err := json.Marshal(w.Status())
		if err != nil {
			http.Error(rw, fmt.Sprintf("encode status: %v", err), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(append(b, '\n'))
	})
	return mux
}
