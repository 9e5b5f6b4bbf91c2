package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Point is one (x, y) sample of a series.
type Point struct{ X, Y float64 }

// Series is one line of a chart, named in its legend.
type Series struct {
	Name   string
	Points []Point
	// Dashed draws a reference line (a target, an SLO) rather than a measurement: dashed,
	// in grey, without point markers.
	Dashed bool
}

// Palette is the measured series' colours in order (colour-blind safe: Okabe–Ito
// vermillion, blue, bluish green, orange, reddish purple, sky blue).
var Palette = []color.RGBA{
	{213, 94, 0, 255}, {0, 114, 178, 255}, {0, 158, 115, 255},
	{230, 159, 0, 255}, {204, 121, 167, 255}, {86, 180, 233, 255},
}

// LineChart is one figure: lines on shared axes, each named in the legend. The axis labels
// should name their units ("offered load (requests/s)").
type LineChart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// YMax fixes the top of the y axis (0: fit the data). The y axis starts at 0, as does
	// the x axis unless a point lies left of it.
	YMax float64
	// LogY draws the y axis on a log scale (every y must then be positive), for latencies
	// that grow by orders of magnitude past a knee.
	LogY bool
	// LegendBottom puts the legend in the lower left corner instead of the upper left
	// (for lines that start high).
	LegendBottom bool
	// XTicks, when set, are the only labelled x values (a sweep's rates).
	XTicks []float64
	// NoMarkers draws the measured lines without a marker per point (time series with
	// hundreds of points).
	NoMarkers bool
	// Width and Height default to 18 × 10 cm.
	Width, Height vg.Length
}

// Plot builds the gonum plot: title, axis labels, a grid, one line per series (with a
// marker per point, so a sweep's rates show) and a legend naming every series.
func (c LineChart) Plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = !c.LegendBottom
	p.Legend.Left = true
	if len(c.XTicks) > 0 {
		ticks := make([]plot.Tick, len(c.XTicks))
		for i, x := range c.XTicks {
			ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)}
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	}
	p.X.Min, p.Y.Min = 0, 0
	measured := 0
	for _, s := range c.Series {
		if len(s.Points) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.Points))
		for j, pt := range s.Points {
			if math.IsNaN(pt.X) || math.IsNaN(pt.Y) || math.IsInf(pt.X, 0) || math.IsInf(pt.Y, 0) {
				return nil, fmt.Errorf("chart %q: series %q point %d is not finite (%v, %v)", c.Title, s.Name, j, pt.X, pt.Y)
			}
			xys[j] = plotter.XY{X: pt.X, Y: pt.Y}
			p.X.Min = math.Min(p.X.Min, pt.X)
		}
		if s.Dashed {
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, fmt.Errorf("chart %q, series %q: %w", c.Title, s.Name, err)
			}
			l.Color = color.Gray{Y: 110}
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			p.Add(l)
			p.Legend.Add(s.Name, l)
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("chart %q, series %q: %w", c.Title, s.Name, err)
		}
		col := Palette[measured%len(Palette)]
		l.Color, l.Width = col, vg.Points(1.5)
		pts.Color = col
		pts.Shape = shapes[measured%len(shapes)]
		measured++
		if c.NoMarkers {
			p.Add(l)
			p.Legend.Add(s.Name, l)
			continue
		}
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
	}
	if c.YMax > 0 {
		p.Y.Max = c.YMax
	}
	if c.LogY {
		lo := math.Inf(1)
		for _, s := range c.Series {
			for _, pt := range s.Points {
				if pt.Y <= 0 {
					return nil, fmt.Errorf("chart %q: series %q has y = %v on a log axis", c.Title, s.Name, pt.Y)
				}
				lo = math.Min(lo, pt.Y)
			}
		}
		if math.IsInf(lo, 1) {
			lo = 1
		}
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	}
	return p, nil
}

// shapes tell the lines apart in grey print too.
var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}}

// Render encodes the chart in format ("png" or "svg").
func (c LineChart) Render(format string) ([]byte, error) {
	p, err := c.Plot()
	if err != nil {
		return nil, err
	}
	w, h := c.Width, c.Height
	if w == 0 {
		w = 18 * vg.Centimeter
	}
	if h == 0 {
		h = 10 * vg.Centimeter
	}
	wt, err := p.WriterTo(w, h, format)
	if err != nil {
		return nil, fmt.Errorf("chart %q: %w", c.Title, err)
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("chart %q: %w", c.Title, err)
	}
	return b.Bytes(), nil
}

// Save writes the chart to path, as PNG or SVG by its extension.
func (c LineChart) Save(path string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format != "png" && format != "svg" {
		return fmt.Errorf("chart %q: %s: want a .png or .svg file", c.Title, path)
	}
	b, err := c.Render(format)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("chart %q: %w", c.Title, err)
	}
	return nil
}
