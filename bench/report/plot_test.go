package report

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testChart() LineChart {
	return LineChart{
		Title: "TTFT p99 against offered load", XLabel: "offered load (requests/s)", YLabel: "TTFT p99 (ms)",
		Series: []Series{
			{Name: "auto + prefix", Points: []Point{{10, 40}, {20, 80}, {30, 400}}},
			{Name: "always P/D + p2c", Points: []Point{{10, 60}, {20, 90}, {30, 900}}},
			{Name: "SLO 500 ms", Points: []Point{{10, 500}, {30, 500}}, Dashed: true},
		},
	}
}

// The PNG decodes, has the chart's size, and draws each measured series in its colour.
func TestLineChartPNGDrawsEverySeries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	c := testChart()
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w < 400 || h < 200 {
		t.Fatalf("%d × %d pixels", w, h)
	}
	seen := map[int]bool{}
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			for i, col := range Palette[:2] {
				if uint8(r>>8) == col.R && uint8(g>>8) == col.G && uint8(bl>>8) == col.B {
					seen[i] = true
				}
			}
		}
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("series colours drawn: %v", seen)
	}
}

// The same chart as SVG carries its text as text: the title, both axis labels with their
// units, and a legend entry per series, named (not numbered).
func TestLineChartHasTitleAxisLabelsAndLegend(t *testing.T) {
	b, err := testChart().Render("svg")
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"TTFT p99 against offered load", "offered load (requests/s)", "TTFT p99 (ms)",
		"auto + prefix", "always P/D + p2c", "SLO 500 ms"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG has no %q", want)
		}
	}
}

func TestLineChartRefusesWhatItCannotDraw(t *testing.T) {
	c := testChart()
	c.Series[0].Points[1].Y = math.NaN()
	if _, err := c.Render("png"); err == nil || !strings.Contains(err.Error(), "auto + prefix") {
		t.Errorf("a NaN point: %v", err)
	}
	if err := testChart().Save(filepath.Join(t.TempDir(), "c.gif")); err == nil {
		t.Error("a .gif path was accepted")
	}
}
