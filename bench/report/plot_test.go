package report

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestPlotPNGDrawsEverySeries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	series := []Series{
		{Name: "a", Points: []Point{{0, 10}, {5, 200}, {10, 50}}},
		{Name: "b", Points: []Point{{0, 20}, {10, 30}}},
	}
	if err := PlotPNG(path, "test", series); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			for i, c := range Palette[:2] {
				if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
					seen[i] = true
				}
			}
		}
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("series colours drawn: %v", seen)
	}
}
