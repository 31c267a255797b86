package coordinator

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Slot utilisation history: a sample every utilEvery, utilKeep of them.
const (
	utilEvery = 5 * time.Second
	utilKeep  = 120 // 10 minutes
)

// utilSample is the share of each replica's generation slots busy at a
// moment.
type utilSample struct {
	At   time.Time
	Used map[string]float64 // replica -> busy / slots, 0..1
}

// utilHistory keeps the slot utilisation of the last minutes, under its
// own lock.
type utilHistory struct {
	mu  sync.Mutex
	buf []utilSample // newest last
}

func (h *utilHistory) add(s utilSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf = append(h.buf, s)
	if len(h.buf) > utilKeep {
		h.buf = append(h.buf[:0], h.buf[len(h.buf)-utilKeep:]...)
	}
}

func (h *utilHistory) samples() []utilSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.buf)
}

// sampleUtil records the slot utilisation of every live replica.
func (c *Coordinator) sampleUtil() {
	now := c.d.Now()
	busy := c.members.busy(now)
	s := utilSample{At: now, Used: map[string]float64{}}
	for r, slots := range c.replicaSlots(now) {
		if slots > 0 {
			s.Used[r] = min(float64(busy[r])/float64(slots), 1)
		}
	}
	c.util.add(s)
}

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct": func(a, b int) string {
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
	},
	"secs": func(s float64) string { return (time.Duration(s * float64(time.Second))).Round(time.Second).String() },
}).Parse(pageHTML))

// chart is the slot-utilisation chart: one polyline per replica on a
// width × height plot, newest at the right.
type chart struct {
	Width, Height int
	Lines         []chartLine
	Span          string // how much time the x axis covers
}

type chartLine struct {
	Replica, Color, Points string
	Last                   string // the newest value, as a percentage
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

func (c *Coordinator) chart(samples []utilSample) chart {
	ch := chart{Width: 720, Height: 200, Span: (utilEvery * utilKeep).String()}
	replicas := c.members.replicas()
	sort.Strings(replicas)
	for i, r := range replicas {
		var pts []string
		last := ""
		for j, s := range samples {
			// Right-aligned: the newest sample at the right edge.
			x := float64(ch.Width) * float64(utilKeep-len(samples)+j) / float64(utilKeep-1)
			y := float64(ch.Height) * (1 - s.Used[r])
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			last = fmt.Sprintf("%.0f%%", 100*s.Used[r])
		}
		ch.Lines = append(ch.Lines, chartLine{Replica: r, Color: palette[i%len(palette)], Points: strings.Join(pts, " "), Last: last})
	}
	return ch
}

// servePage serves the status page: the status, as `actloop status` shows
// it, and the slot utilisation of the last minutes. It is one HTML page
// with no scripts and no external assets, and reloads itself. A source of
// the status that cannot be read is named at the top; the rest shows.
func (c *Coordinator) servePage(w http.ResponseWriter, r *http.Request) {
	st, util, _ := c.viewed(r.Context())
	finished := make([]string, 0, len(st.Finished))
	for k := range st.Finished {
		finished = append(finished, k)
	}
	sort.Strings(finished)
	var b bytes.Buffer
	err := pageTmpl.Execute(&b, map[string]any{"S": st, "Chart": c.chart(util), "FinishedKeys": finished,
		"Now": c.d.Now().UTC().Format(time.RFC3339), "Refresh": int(utilEvery.Seconds())})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_, _ = w.Write(b.Bytes())
}
