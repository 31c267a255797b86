package bench

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeCharts writes one PNG per scenario into dir: the replicas' slot use
// over simulated time for every mode (left), and each mode's makespan
// against the batch's lower bound (right). It returns the files written.
func writeCharts(dir string, results []Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var order []string
	by := map[string][]Result{}
	for _, r := range results {
		if _, ok := by[r.Scenario]; !ok {
			order = append(order, r.Scenario)
		}
		by[r.Scenario] = append(by[r.Scenario], r)
	}
	var files []string
	for _, sc := range order {
		use, err := slotUseChart(sc, by[sc])
		if err != nil {
			return files, err
		}
		span, err := makespanChart(sc, by[sc])
		if err != nil {
			return files, err
		}
		const w, h = 14 * vg.Inch, 5 * vg.Inch
		img := vgimg.New(w, h)
		dc := draw.New(img)
		tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8,
			PadLeft: vg.Inch / 8, PadRight: vg.Inch / 4}
		canvases := plot.Align([][]*plot.Plot{{use, span}}, tiles, dc)
		use.Draw(canvases[0][0])
		span.Draw(canvases[0][1])
		path := filepath.Join(dir, sc+".png")
		f, err := os.Create(path)
		if err != nil {
			return files, err
		}
		_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return files, fmt.Errorf("chart %s: %w", path, err)
		}
		files = append(files, path)
	}
	return files, nil
}

// slotUseChart draws each mode's use over simulated time, smoothed over a
// few samples so that the lines can be told apart: the KV pools' on the
// virtual engine, the slots' on the live one.
func slotUseChart(scenario string, rs []Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = scenario + ": slot use over time"
	p.X.Label.Text = "simulated seconds"
	p.Y.Label.Text = "share of slots running a request"
	if len(rs) > 0 && rs[0].Engine == EngineVirtual {
		p.Title.Text = scenario + ": KV pool use over time (first seed)"
		p.Y.Label.Text = "share of the token pools held by running requests"
	}
	p.Y.Min, p.Y.Max = 0, 1.05
	p.Legend.Top, p.Legend.Left = false, false
	for i, r := range rs {
		series, step := r.SlotUseSeries, r.SlotUseStepS
		if r.Engine == EngineVirtual {
			series, step = r.KVUseSeries, r.KVUseStepS
		}
		const window = 5
		pts := make(plotter.XYs, len(series))
		sum := 0.0
		for j, u := range series {
			sum += u
			if j >= window {
				sum -= series[j-window]
			}
			pts[j].X = float64(j+1) * step
			pts[j].Y = sum / float64(min(j+1, window))
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.Mode, l)
	}
	return p, nil
}

// makespanChart draws each mode's makespan as a bar, with the lower bound
// as a horizontal line.
func makespanChart(scenario string, rs []Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = scenario + ": makespan by mode"
	p.Y.Label.Text = "simulated seconds"
	vals := make(plotter.Values, len(rs))
	names := make([]string, len(rs))
	for i, r := range rs {
		vals[i] = r.MakespanS
		names[i] = fmt.Sprintf("%s\n%.2f× bound", r.Mode, r.VsBound)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return nil, err
	}
	bars.Color = color.RGBA{R: 70, G: 110, B: 170, A: 255}
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0
	p.X.Tick.Label.Font.Size = vg.Points(7)
	if len(rs) > 0 {
		bound := rs[0].BoundS
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: bound}, {X: float64(len(rs)) - 0.5, Y: bound}})
		if err != nil {
			return nil, err
		}
		l.Color = color.RGBA{R: 200, A: 255}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("lower bound %.0f s", bound), l)
		p.Legend.Top = true
	}
	p.Y.Min = 0
	p.Y.Max *= 1.08 // room for the legend above the tallest bar
	return p, nil
}
