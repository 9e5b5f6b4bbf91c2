package report

import (
	"strings"
	"unicode/utf8"
)

// Table is a text table with aligned columns: the first left-aligned, the others right.
type Table struct {
	header []string
	rows   [][]string
}

// NewTable starts a table with its header.
func NewTable(header ...string) *Table { return &Table{header: header} }

// Row adds a row; missing cells are blank.
func (t *Table) Row(cells ...string) { t.rows = append(t.rows, cells) }

// String renders the table.
func (t *Table) String() string {
	width := make([]int, len(t.header))
	all := append([][]string{t.header}, t.rows...)
	for _, r := range all {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	var b strings.Builder
	for ri, r := range all {
		for i := range width {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteByte('\n')
		if ri == 0 {
			total := 0
			for _, w := range width {
				total += w
			}
			b.WriteString(strings.Repeat("-", total+2*(len(width)-1)))
			b.WriteByte('\n')
		}
	}
	return b.String()
}
