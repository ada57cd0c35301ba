package layout

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/c-api.md's table of the library's options names each option of
// Options once, with its default and its builds, and no other.
func TestDocsOptionsTable(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "docs", "c-api.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type row struct{ def, builds string }
	docs := map[string]row{}
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| variable | default | builds |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			if len(docs) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, "|")
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if _, dup := docs[name]; dup {
			t.Errorf("docs/c-api.md names %s twice", name)
		}
		docs[name] = row{strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("docs/c-api.md: no options table")
	}
	for _, o := range Options {
		d, ok := docs[o.Name]
		if !ok {
			t.Errorf("docs/c-api.md: no row for %s", o.Name)
			continue
		}
		if d.def != o.Default || d.builds != o.Builds.String() {
			t.Errorf("docs/c-api.md: %s: default %q, builds %q; the library's are %q, %q", o.Name, d.def, d.builds, o.Default, o.Builds)
		}
		delete(docs, o.Name)
	}
	for name := range docs {
		t.Errorf("docs/c-api.md: %s is no option of the library's (internal/layout/mklayout/desc.go)", name)
	}
}
