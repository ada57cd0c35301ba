package alloc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/procbooks"
)

// regionBudgets reads the books region as tagalloc top reads it (from
// the process's memory) and as a snapshot of it parses, checks that both
// say the same, and returns the budgets on tags starting with prefix, by
// tag, with the region's tags.
func regionBudgets(t *testing.T, prefix string) (map[string]books.Budget, map[string]books.TagTotals) {
	t.Helper()
	r := Region()
	require.NotNil(t, r, "no books region")
	snap, err := r.Snapshot()
	require.NoError(t, err)
	proc, err := procbooks.Read(os.Getpid())
	require.NoError(t, err, "procbooks.Read (as tagalloc top)")
	pick := func(s *books.Snapshot) map[string]books.Budget {
		m := map[string]books.Budget{}
		for _, b := range s.Budgets {
			if strings.HasPrefix(b.Tag, prefix) {
				_, dup := m[b.Tag]
				require.False(t, dup, "two budgets on %s: %+v", b.Tag, s.Budgets)
				m[b.Tag] = b
			}
		}
		return m
	}
	got := pick(snap)
	require.Equal(t, got, pick(proc), "the snapshot and the process's memory")
	tags := map[string]books.TagTotals{}
	for _, tt := range snap.Tags {
		tags[tt.Name] = tt
	}
	return got, tags
}

// liveUnderIn sums the region's live bytes of the tags a budget on tag
// covers.
func liveUnderIn(tags map[string]books.TagTotals, tag string) uint64 {
	var n uint64
	for name, tt := range tags {
		if covers(tag, name) {
			n += tt.LiveBytes
		}
	}
	return n
}

// asBooks is a budget as the books show it, from Budgets.
func asBooks(st BudgetStat, over bool) books.Budget {
	return books.Budget{Tag: st.Tag, Limit: st.Limit, Policy: st.Policy.String(), Charged: st.Charged,
		Crossings: st.Crossings, Refused: st.Refused, Over: over}
}

// The budgets are in the books region, as tagalloc run, top and snapshot
// read it: set, changed, crossed, refusing and removed, their charge the
// region's live bytes of the tags they cover.
func TestBudgetsInBooks(t *testing.T) {
	setBudget(t, "bt-books", 8192, BudgetFail)
	setBudget(t, "bt-books/b", 2048, BudgetObserve)
	require.NoError(t, SetBudget("bt-books-gone", 1024, BudgetNotify))
	got, _ := regionBudgets(t, "bt-books")
	require.Equal(t, map[string]books.Budget{
		"bt-books":      {Tag: "bt-books", Limit: 8192, Policy: "fail"},
		"bt-books/b":    {Tag: "bt-books/b", Limit: 2048, Policy: "observe"},
		"bt-books-gone": {Tag: "bt-books-gone", Limit: 1024, Policy: "notify"},
	}, got, "a level no tag has used is named")
	require.NoError(t, SetBudget("bt-books-gone", 0, BudgetFail))
	got, _ = regionBudgets(t, "bt-books")
	require.NotContains(t, got, "bt-books-gone", "a removed budget is not shown")

	var live [][]byte
	for range 4 {
		live = append(live, Malloc(1024, "bt-books/a"))
	}
	for range 3 {
		live = append(live, Malloc(1000, "bt-books/b/x")) // 1 KiB usable: crosses the inner budget
	}
	require.Nil(t, Malloc(2048, "bt-books/a"), "refused by the outer budget")
	live = append(live, Malloc(1024, "bt-books")) // its own tag: at the limit
	require.Nil(t, Malloc(1, "bt-books/b"))
	for _, b := range live {
		require.NotNil(t, b)
	}

	got, tags := regionBudgets(t, "bt-books")
	outer, inner := got["bt-books"], got["bt-books/b"]
	require.Equal(t, books.Budget{Tag: "bt-books", Limit: 8192, Policy: "fail", Charged: 8192, Crossings: 1, Refused: 2, Over: true}, outer)
	require.Equal(t, books.Budget{Tag: "bt-books/b", Limit: 2048, Policy: "observe", Charged: 3072, Crossings: 1, Over: true}, inner)
	require.Equal(t, liveUnderIn(tags, "bt-books"), outer.Charged, "the charge is the books' live bytes of its tags")
	require.Equal(t, liveUnderIn(tags, "bt-books/b"), inner.Charged)
	require.Equal(t, asBooks(budgetOf(t, "bt-books"), true), outer, "the region says what Budgets says")
	require.Equal(t, asBooks(budgetOf(t, "bt-books/b"), true), inner)

	// Frees: the charges go down, neither is over any more; a new limit
	// and policy show.
	Free(live[4])
	Free(live[5])
	live = append(live[:4], live[6:]...)
	require.NoError(t, SetBudget("bt-books", 1<<20, BudgetNotify))
	got, tags = regionBudgets(t, "bt-books")
	require.Equal(t, books.Budget{Tag: "bt-books", Limit: 1 << 20, Policy: "notify", Charged: 6144, Crossings: 1, Refused: 2}, got["bt-books"])
	require.Equal(t, books.Budget{Tag: "bt-books/b", Limit: 2048, Policy: "observe", Charged: 1024, Crossings: 1}, got["bt-books/b"])
	require.Equal(t, liveUnderIn(tags, "bt-books"), got["bt-books"].Charged)

	// Lowered under the charge: an observe budget is over at once.
	require.NoError(t, SetBudget("bt-books/b", 512, BudgetObserve))
	got, _ = regionBudgets(t, "bt-books")
	require.True(t, got["bt-books/b"].Over)

	for _, b := range live {
		Free(b)
	}
	got, _ = regionBudgets(t, "bt-books")
	require.Zero(t, got["bt-books"].Charged)
	require.Zero(t, got["bt-books/b"].Charged)
	require.False(t, got["bt-books/b"].Over)
}

// More budgets set and removed than the table has slots: the region
// shows the ones set, each with its counts, after the table is renewed
// (the live budgets move to a new one), and their charge moves on there.
func TestBudgetsInBooksChurn(t *testing.T) {
	keep := []string{"bt-churn/keep-a", "bt-churn/keep-b"}
	for _, k := range keep {
		setBudget(t, k, 1<<20, BudgetObserve)
	}
	a := Malloc(4096, "bt-churn/keep-a/x")
	defer func() { Free(a) }()
	for i := range 3 * maxBudgets {
		name := fmt.Sprintf("bt-churn/gone-%d", i)
		require.NoError(t, SetBudget(name, 1024, BudgetFail))
		b := Malloc(100, name)
		require.NotNil(t, b)
		if i%2 == 0 {
			Free(b)
		}
		require.NoError(t, SetBudget(name, 0, BudgetFail))
		if i%2 != 0 {
			Free(b) // under no budget now
		}
	}
	setBudget(t, "bt-churn/late", 4096, BudgetFail)
	b, c := Malloc(4096, "bt-churn/keep-b"), Malloc(4096, "bt-churn/late")
	defer func() { Free(b); Free(c) }()
	require.Nil(t, Malloc(1, "bt-churn/late"))
	got, tags := regionBudgets(t, "bt-churn")
	want := map[string]books.Budget{}
	for _, st := range Budgets() {
		if strings.HasPrefix(st.Tag, "bt-churn") {
			want[st.Tag] = asBooks(st, st.Refused > 0 || st.Charged > st.Limit)
		}
	}
	require.Len(t, want, 3)
	require.Equal(t, want, got)
	require.Equal(t, books.Budget{Tag: "bt-churn/late", Limit: 4096, Policy: "fail", Charged: 4096, Crossings: 1, Refused: 1, Over: true},
		got["bt-churn/late"])
	require.Equal(t, uint64(4096), got["bt-churn/keep-a"].Charged)
	require.Equal(t, liveUnderIn(tags, "bt-churn/keep-b"), got["bt-churn/keep-b"].Charged)
	require.Equal(t, uint64(4096), got["bt-churn/keep-b"].Charged)
}

// Goroutines racing at a budget's limit, and across a notify budget's:
// once they are done, the region's copy is the budget's, to the byte.
func TestBudgetsInBooksRace(t *testing.T) {
	setBudget(t, "bt-bookrace", 32<<10, BudgetFail)
	setBudget(t, "bt-bookrace/n", 4<<10, BudgetNotify)
	iters := 5000
	if testing.Short() {
		iters = 1000
	}
	var wg sync.WaitGroup
	held := make([][][]byte, 8)
	for g := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"bt-bookrace", "bt-bookrace/n"}[g%2]
			for i := range iters {
				if len(held[g]) > 6 || (len(held[g]) > 0 && i%3 == 0) {
					Free(held[g][len(held[g])-1])
					held[g] = held[g][:len(held[g])-1]
					continue
				}
				if b := Malloc(1024, name); b != nil {
					held[g] = append(held[g], b)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { // a reader meanwhile, as tagalloc top
		defer close(done)
		for range 20 {
			_, err := Region().Snapshot()
			require.NoError(t, err)
		}
	}()
	wg.Wait()
	<-done
	check := func() {
		got, tags := regionBudgets(t, "bt-bookrace")
		for _, tag := range []string{"bt-bookrace", "bt-bookrace/n"} {
			st := budgetOf(t, tag)
			require.Equal(t, asBooks(st, got[tag].Over), got[tag], "%s", tag)
			require.Equal(t, liveUnderIn(tags, tag), got[tag].Charged, "%s", tag)
		}
		n := got["bt-bookrace/n"]
		require.Equal(t, n.Charged > n.Limit, n.Over, "notify: over while past the limit")
	}
	check()
	require.Positive(t, budgetOf(t, "bt-bookrace").Refused)
	for _, h := range held {
		for _, b := range h {
			Free(b)
		}
	}
	check()
}

// A Go program's budgets are in its region file (tagalloc run's books
// directory), read after it ended.
func TestBudgetsInRegionFile(t *testing.T) {
	dir := t.TempDir()
	childSays(t, "TestBudgetsFileChild", "budgets file child done", "TAGALLOC_DIR="+dir)
	snaps, err := books.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, snaps, 1)
	require.Equal(t, []books.Budget{
		{Tag: "file", Limit: 4096, Policy: "fail", Charged: 4096, Crossings: 1, Refused: 1, Over: true},
		{Tag: "file/sub", Limit: 1 << 20, Policy: "observe", Charged: 3072},
	}, snaps[0].Budgets)
	var live uint64
	for _, tt := range snaps[0].Tags {
		if covers("file", tt.Name) {
			live += tt.LiveBytes
		}
	}
	require.Equal(t, uint64(4096), live)
	files, _ := filepath.Glob(filepath.Join(dir, "*.go.tagalloc"))
	require.Len(t, files, 1, "package alloc's region")
}

func TestBudgetsFileChild(t *testing.T) {
	inChild(t, "TestBudgetsInRegionFile")
	require.NoError(t, SetBudget("file", 4096, BudgetFail))
	require.NoError(t, SetBudget("file/sub", 1<<20, BudgetObserve))
	require.NoError(t, SetBudget("file/removed", 1<<20, BudgetObserve))
	require.NoError(t, SetBudget("file/removed", 0, BudgetObserve))
	Malloc(1024, "file")
	for range 3 {
		Malloc(1024, "file/sub/x")
	}
	require.Nil(t, Malloc(1, "file/sub"))
	fmt.Println("budgets file child done")
}
