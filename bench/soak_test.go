package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoakShort: the soak for a minute (every mode at least once): no
// failed run, no byte lost, the books checked against heap walks, and
// injected failures survived.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of stress: not in -short")
	}
	var log strings.Builder
	res, err := Soak(context.Background(), SoakConfig{Duration: 60 * time.Second, Threads: 3, Ops: 3000, Seed: 7,
		Timeout: 3 * time.Minute, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	res.WriteSummary(os.Stderr, 3)
	t.Log("\n" + log.String())
	if res.Failures != 0 || res.LostBytes != 0 {
		t.Fatalf("%d failed runs, %d bytes lost", res.Failures, res.LostBytes)
	}
	if len(res.Runs) < len(SoakModes) {
		t.Fatalf("%d runs: not every mode ran", len(res.Runs))
	}
	if res.BooksChecks < int64(2*len(res.Runs)) || res.RegionsRead == 0 || res.Ops == 0 {
		t.Fatalf("too little checked: %+v", res)
	}
	if res.ENOMEM == 0 {
		t.Fatal("the faults run saw no injected failure")
	}
}

// The soak counts what tagalloc_check_books says is off, usable and
// requested bytes alike, as lost.
func TestSoakCountsDrift(t *testing.T) {
	for text, want := range map[string]int64{
		`tagalloc: books of tag "stress-odd": 11771328 bytes in 634 blocks, but the heap holds 11771360 bytes in 635 blocks`: 32,
		`tagalloc: books of tag "untagged": 54999281 requested bytes, but the heap's live blocks asked for 54999361`:         80,
	} {
		var lost int64
		for _, m := range driftRE.FindAllStringSubmatch(text, -1) {
			a, b := atoi(m[1]), atoi(m[2])
			lost += max(a-b, b-a)
		}
		if lost != want {
			t.Errorf("%q: lost %d, want %d", text, lost, want)
		}
	}
}

func atoi(s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}

// A run that hangs in a child it forked fails at its timeout: the whole
// process group is killed, and the output pipes the child held do not
// keep the soak waiting (a forked stress_test child that hung kept the
// soak test past its timeout).
func TestSoakRunKillsItsChildren(t *testing.T) {
	start := time.Now()
	r := runStress(context.Background(), "/bin/sh", []string{"-c", "sleep 60 & sleep 60"}, nil, time.Second)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "hung") {
		t.Fatalf("err %v, want a hang", r.Err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v: the child kept the run waiting", d)
	}
}
