package report

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strconv"
)

// Point is one (x, y) sample of a series.
type Point struct{ X, Y float64 }

// Series is one line of a plot.
type Series struct {
	Name   string
	Points []Point
}

// Palette is the series colours in order: red, blue, green, then grey.
var Palette = []color.RGBA{{200, 40, 40, 255}, {40, 80, 200, 255}, {30, 150, 60, 255}, {120, 120, 120, 255}}

const (
	plotW, plotH = 900, 420
	marginL      = 60
	marginB      = 30
	marginT      = 20
	marginR      = 20
)

// PlotPNG draws the series as lines on shared axes (both from 0) and writes a PNG to path:
// y-axis ticks labelled with their values, x-axis ticks every tenth of the range, one
// colour per series in Palette order with a legend square and the series' index. Pure Go
// (image/png): the report stays reproducible without plotting tools. title is not drawn; it
// names the plot in errors.
func PlotPNG(path, title string, series []Series) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	maxX, maxY := 1.0, 1.0
	for _, s := range series {
		for _, p := range s.Points {
			maxX, maxY = math.Max(maxX, p.X), math.Max(maxY, p.Y)
		}
	}
	maxY = niceCeil(maxY)
	x0, y0, x1, y1 := marginL, plotH-marginB, plotW-marginR, marginT
	px := func(x float64) int { return x0 + int(x/maxX*float64(x1-x0)) }
	py := func(y float64) int { return y0 - int(y/maxY*float64(y0-y1)) }
	grey := color.RGBA{200, 200, 200, 255}
	black := color.RGBA{0, 0, 0, 255}
	for i := 0; i <= 5; i++ { // horizontal grid with labels
		v := maxY * float64(i) / 5
		y := py(v)
		line(img, x0, y, x1, y, grey)
		text(img, x0-6-textWidth(label(v)), y-3, label(v), black)
	}
	for i := 0; i <= 10; i++ {
		v := maxX * float64(i) / 10
		x := px(v)
		line(img, x, y0, x, y0+4, black)
		text(img, x-textWidth(label(v))/2, y0+8, label(v), black)
	}
	line(img, x0, y0, x1, y0, black)
	line(img, x0, y0, x0, y1, black)
	for i, s := range series {
		c := Palette[min(i, len(Palette)-1)]
		for j := 1; j < len(s.Points); j++ {
			a, b := s.Points[j-1], s.Points[j]
			line(img, px(a.X), py(a.Y), px(b.X), py(b.Y), c)
			line(img, px(a.X), py(a.Y)+1, px(b.X), py(b.Y)+1, c)
		}
		lx := x1 - 120
		ly := y1 + 6 + i*14
		fill(img, image.Rect(lx, ly, lx+10, ly+10), c)
		text(img, lx+14, ly+2, strconv.Itoa(i+1), black)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot %q: %w", title, err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("plot %q: %w", title, err)
	}
	return f.Close()
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func label(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// line draws with Bresenham's algorithm.
func line(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA) {
	dx, dy := abs(xb-xa), -abs(yb-ya)
	sx, sy := sign(xb-xa), sign(yb-ya)
	e := dx + dy
	for {
		img.SetRGBA(xa, ya, c)
		if xa == xb && ya == yb {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			xa += sx
		} else {
			e += dx
			ya += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// digits is a 3×5 bitmap font for tick labels: each glyph is five rows of three bits.
var digits = map[byte][5]uint8{
	'0': {7, 5, 5, 5, 7}, '1': {2, 6, 2, 2, 7}, '2': {7, 1, 7, 4, 7}, '3': {7, 1, 7, 1, 7},
	'4': {5, 5, 7, 1, 1}, '5': {7, 4, 7, 1, 7}, '6': {7, 4, 7, 5, 7}, '7': {7, 1, 1, 1, 1},
	'8': {7, 5, 7, 5, 7}, '9': {7, 5, 7, 1, 7}, '.': {0, 0, 0, 0, 2}, '-': {0, 0, 7, 0, 0},
}

const glyphScale = 2

func textWidth(s string) int { return len(s) * 4 * glyphScale }

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for i := 0; i < len(s); i++ {
		g, ok := digits[s[i]]
		if !ok {
			continue
		}
		for row := 0; row < 5; row++ {
			for col := 0; col < 3; col++ {
				if g[row]&(4>>col) != 0 {
					gx, gy := x+i*4*glyphScale+col*glyphScale, y+row*glyphScale
					fill(img, image.Rect(gx, gy, gx+glyphScale, gy+glyphScale), c)
				}
			}
		}
	}
}
