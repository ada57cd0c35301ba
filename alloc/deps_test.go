package alloc

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: a program that only wants off-heap memory links
// neither the symbolizer (debug/elf, debug/dwarf) nor pprof (issue 24,
// item 2): alloc reaches the reporter registry through reporter/registry
// and writes its books through package books, which leaves reading a
// running process (an ELF symbol) to procbooks.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "debug/dwarf", dep == "debug/elf", strings.HasPrefix(dep, "github.com/google/pprof"):
			t.Errorf("package alloc depends on %s", dep)
		}
	}
}
