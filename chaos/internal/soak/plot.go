package soak

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Chart is one PNG of series over time.
type Chart struct {
	Title  string
	YLabel string
	// Series are the series drawn, one line each, with their legend
	// names; a series absent from every sample is left out.
	Series []string
	// Legend names the lines (defaults to the series names).
	Legend []string
	// Scale multiplies every value (1/2^20 for MiB).
	Scale float64
	// Log draws the Y axis on a log scale (values <= 0 are dropped).
	Log bool
}

// WritePNG draws c from samples into path (PNG, 8x4 inches), the X axis in
// minutes since the run's start. It returns an error when no series of c
// has a point.
func WritePNG(path string, c Chart, samples []Sample) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = "minutes since the start of the load"
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	if c.Log {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	scale := c.Scale
	if scale == 0 {
		scale = 1
	}
	var args []any
	for i, name := range c.Series {
		var xys plotter.XYs
		for _, pt := range Series(samples, name) {
			v := pt.V * scale
			if math.IsNaN(v) || (c.Log && v <= 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: pt.T / 60, Y: v})
		}
		if len(xys) == 0 {
			continue
		}
		legend := name
		if i < len(c.Legend) {
			legend = c.Legend[i]
		}
		args = append(args, legend, xys)
	}
	if len(args) == 0 {
		return fmt.Errorf("soak: chart %q: no series has a point", c.Title)
	}
	if err := plotutil.AddLines(p, args...); err != nil {
		return fmt.Errorf("soak: chart %q: %w", c.Title, err)
	}
	if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("soak: chart %q: %w", c.Title, err)
	}
	return nil
}
