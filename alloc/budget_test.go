package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/books"
)

// setBudget sets a budget for the test and removes it when it ends.
func setBudget(t *testing.T, tag string, bytes uint64, policy BudgetPolicy) {
	t.Helper()
	require.NoError(t, SetBudget(tag, bytes, policy))
	t.Cleanup(func() { require.NoError(t, SetBudget(tag, 0, BudgetFail)) })
}

// budgetOf is tag's budget as Budgets reports it.
func budgetOf(t *testing.T, tag string) BudgetStat {
	t.Helper()
	for _, b := range Budgets() {
		if b.Tag == tag {
			return b
		}
	}
	t.Fatalf("no budget on %q in %+v", tag, Budgets())
	return BudgetStat{}
}

// onBudget records the notify callback's calls for the test.
func onBudget(t *testing.T) func() []string {
	var mu sync.Mutex
	var calls []string
	OnBudget(func(tag string, limit, charged uint64) {
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%s %d %d", tag, limit, charged))
		mu.Unlock()
	})
	t.Cleanup(func() { OnBudget(nil) })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}
}

func TestBudgetPolicyString(t *testing.T) {
	require.Equal(t, "fail", BudgetFail.String())
	require.Equal(t, "notify", BudgetNotify.String())
	require.Equal(t, "observe", BudgetObserve.String())
	require.Equal(t, "BudgetPolicy(9)", BudgetPolicy(9).String())
}

// Under fail, the block that would pass the limit is refused: nil, not
// charged, not in the books; the refusal and one crossing are counted
// until a free lowers the charge.
func TestBudgetFail(t *testing.T) {
	calls := onBudget(t)
	setBudget(t, "bt-fail", 4096, BudgetFail)
	tag := MustTag("bt-fail/a")
	var live [][]byte
	for range 4 {
		b := tag.Malloc(1024)
		require.NotNil(t, b)
		live = append(live, b)
	}
	require.Equal(t, BudgetStat{Tag: "bt-fail", Limit: 4096, Policy: BudgetFail, Charged: 4096}, budgetOf(t, "bt-fail"))

	before := statOf(t, "bt-fail/a")
	require.Nil(t, tag.Malloc(1))
	require.Nil(t, Malloc(1024, "bt-fail/a"))
	require.Nil(t, tag.Calloc(5000))
	require.Nil(t, Calloc(1<<20, "bt-fail/a")) // large
	require.Equal(t, before, statOf(t, "bt-fail/a"), "a refused block is not in the books")
	require.Equal(t, BudgetStat{Tag: "bt-fail", Limit: 4096, Policy: BudgetFail, Charged: 4096, Crossings: 1, Refused: 4},
		budgetOf(t, "bt-fail"))
	require.Empty(t, calls(), "no callback under fail")

	b := tag.Malloc(0) // no block: nothing to refuse
	require.NotNil(t, b)
	require.Zero(t, cap(b))

	Free(live[0]) // the charge goes down: the next refusal is a new crossing
	require.Equal(t, uint64(3072), budgetOf(t, "bt-fail").Charged)
	live[0] = tag.Calloc(1000)
	require.NotNil(t, live[0])
	require.Nil(t, tag.Malloc(16))
	st := budgetOf(t, "bt-fail")
	require.Equal(t, uint64(4096), st.Charged)
	require.Equal(t, uint64(2), st.Crossings)
	require.Equal(t, uint64(5), st.Refused)

	for _, b := range live {
		Free(b)
	}
	require.Zero(t, budgetOf(t, "bt-fail").Charged)
	require.Zero(t, statOf(t, "bt-fail/a").LiveBytes)
}

// Under notify, every allocation goes through; the callback runs once
// per crossing (from at most the limit to past it) and again only after
// the charge came back to at most the limit. Observe counts the same
// crossings without a callback.
func TestBudgetNotifyObserve(t *testing.T) {
	for _, policy := range []BudgetPolicy{BudgetNotify, BudgetObserve} {
		t.Run(policy.String(), func(t *testing.T) {
			calls := onBudget(t)
			name := "bt-" + policy.String()
			setBudget(t, name, 2048, policy)
			tag := MustTag(name + "/x")
			want := func(calls ...string) []string {
				if policy == BudgetObserve {
					return nil
				}
				return calls
			}
			a, b := tag.Malloc(1024), tag.Malloc(1024) // at the limit, not past it
			require.Empty(t, calls())
			c := tag.Calloc(1024) // crosses
			require.Equal(t, want(name+" 2048 3072"), calls())
			d := tag.Malloc(1024) // already past: no new crossing
			require.Equal(t, want(name+" 2048 3072"), calls())
			require.Equal(t, BudgetStat{Tag: name, Limit: 2048, Policy: policy, Charged: 4096, Crossings: 1}, budgetOf(t, name))

			Free(d)
			Free(c) // back to the limit: armed again
			c = tag.Malloc(2000)
			require.Equal(t, want(name+" 2048 3072", name+" 2048 4096"), calls())
			require.Equal(t, uint64(2), budgetOf(t, name).Crossings)
			require.Equal(t, statOf(t, name+"/x").LiveBytes, budgetOf(t, name).Charged)
			for _, x := range [][]byte{a, b, c} {
				Free(x)
			}
			require.Zero(t, budgetOf(t, name).Charged)
		})
	}
}

// Nested budgets: each is checked, and a refusal by one charges none.
func TestBudgetNested(t *testing.T) {
	setBudget(t, "bt-nest", 8192, BudgetFail)
	setBudget(t, "bt-nest/webgl", 2048, BudgetFail)
	tex, audio, top := MustTag("bt-nest/webgl/tex"), MustTag("bt-nest/audio"), MustTag("bt-nest")
	other := MustTag("bt-nestx") // a name starting with the budget's, not under it
	var live [][]byte
	get := func(tg *Tag, n int) []byte {
		b := tg.Malloc(n)
		if b != nil {
			live = append(live, b)
		}
		return b
	}
	require.NotNil(t, get(tex, 1024))
	require.NotNil(t, get(tex, 1024))
	require.Nil(t, get(tex, 1024), "the inner budget refuses")
	require.Equal(t, uint64(1), budgetOf(t, "bt-nest/webgl").Refused)
	require.Equal(t, uint64(0), budgetOf(t, "bt-nest").Refused)
	require.Equal(t, uint64(2048), budgetOf(t, "bt-nest").Charged, "the refusal gave the outer budget its bytes back")

	for range 5 {
		require.NotNil(t, get(audio, 1024))
	}
	require.NotNil(t, get(top, 1024)) // the budget's own tag
	require.NotNil(t, get(other, 1<<20))
	require.Equal(t, uint64(8192), budgetOf(t, "bt-nest").Charged)
	require.Nil(t, get(audio, 16), "the outer budget refuses")
	require.Equal(t, uint64(1), budgetOf(t, "bt-nest").Refused)

	Free(live[0]) // a tex block: both charges go down
	live = live[1:]
	require.Equal(t, uint64(1024), budgetOf(t, "bt-nest/webgl").Charged)
	require.Equal(t, uint64(7168), budgetOf(t, "bt-nest").Charged)
	require.NotNil(t, get(audio, 1024))
	require.Nil(t, get(tex, 16), "the outer budget refuses what the inner one has room for")
	st, inner := budgetOf(t, "bt-nest"), budgetOf(t, "bt-nest/webgl")
	require.Equal(t, uint64(8192), st.Charged)
	require.Equal(t, uint64(2), st.Refused)
	require.Equal(t, uint64(1024), inner.Charged, "the inner budget got its bytes back")
	require.Equal(t, uint64(1), inner.Refused)

	// The inner one observing: the outer still refuses, and charges the
	// inner one nothing when it does.
	require.NoError(t, SetBudget("bt-nest/webgl", 16, BudgetObserve))
	require.Nil(t, get(tex, 16))
	require.Equal(t, uint64(1024), budgetOf(t, "bt-nest/webgl").Charged)
	require.Equal(t, uint64(3), budgetOf(t, "bt-nest").Refused)

	for _, b := range live {
		Free(b)
	}
	require.Zero(t, budgetOf(t, "bt-nest").Charged)
	require.Zero(t, budgetOf(t, "bt-nest/webgl").Charged)
}

// A budget set over live blocks starts charged with their usable bytes
// (every size: small, large, huge), and their frees are debited.
func TestBudgetSetOverLiveBlocks(t *testing.T) {
	var live [][]byte
	var want uint64
	for i, n := range sizes {
		name := []string{"bt-late", "bt-late/a", "bt-late/a/b"}[i%3]
		live = append(live, Malloc(n, name))
		want += usable(n)
	}
	outside := Malloc(4096, "bt-latex")
	setBudget(t, "bt-late", 1, BudgetObserve)
	st := budgetOf(t, "bt-late")
	require.Equal(t, want, st.Charged)
	require.Equal(t, uint64(1), st.Crossings, "set over its limit: crossed already")

	// More blocks, of a tag first used now, then every free: the charge
	// follows the books.
	for _, n := range sizes {
		live = append(live, Malloc(n, "bt-late/new"))
		want += usable(n)
	}
	require.Equal(t, want, budgetOf(t, "bt-late").Charged)
	var books uint64
	for _, name := range []string{"bt-late", "bt-late/a", "bt-late/a/b", "bt-late/new"} {
		books += statOf(t, name).LiveBytes
	}
	require.Equal(t, want, books)
	for _, b := range live {
		Free(b)
	}
	Free(outside)
	require.Zero(t, budgetOf(t, "bt-late").Charged)
	require.Equal(t, uint64(1), budgetOf(t, "bt-late").Crossings)
}

// bytes 0 removes a budget: its tags allocate freely, and a budget set
// again starts from the books.
func TestBudgetRemove(t *testing.T) {
	require.NoError(t, SetBudget("bt-remove", 1024, BudgetFail))
	tag := MustTag("bt-remove")
	a := tag.Malloc(1024)
	require.NotNil(t, a)
	require.Nil(t, tag.Malloc(1024))
	require.NoError(t, SetBudget("bt-remove", 0, BudgetFail))
	for _, b := range Budgets() {
		require.NotEqual(t, "bt-remove", b.Tag)
	}
	require.Nil(t, tag.budgets.Load())
	b := tag.Malloc(1024)
	require.NotNil(t, b)
	require.NoError(t, SetBudget("bt-remove", 0, BudgetFail), "removing no budget is no error")

	setBudget(t, "bt-remove", 4096, BudgetFail)
	require.Equal(t, uint64(2048), budgetOf(t, "bt-remove").Charged)
	Free(a)
	Free(b)
	require.Zero(t, budgetOf(t, "bt-remove").Charged)

	// Setting it again changes the limit and policy, keeps the counts.
	c := tag.Malloc(4096)
	require.Nil(t, tag.Malloc(1))
	require.NoError(t, SetBudget("bt-remove", 8192, BudgetObserve))
	require.Equal(t, BudgetStat{Tag: "bt-remove", Limit: 8192, Policy: BudgetObserve, Charged: 4096, Crossings: 1, Refused: 1},
		budgetOf(t, "bt-remove"))
	Free(c)
}

// A bad name is NewTag's error; a bad policy an error too.
func TestBudgetBadName(t *testing.T) {
	for _, name := range []string{"", "a//b", "/a", "a/", "a/./b", "a/../b", "nul\x00", strings.Repeat("x", 64)} {
		err := SetBudget(name, 1024, BudgetFail)
		require.Error(t, err, "%q", name)
		require.True(t, errors.Is(err, books.ErrBadTag), "%q: %v", name, err)
		_, want := NewTag(name)
		require.Equal(t, want.Error(), err.Error())
	}
	require.Error(t, SetBudget("bt-policy", 1024, BudgetPolicy(0)))
	require.Error(t, SetBudget("bt-policy", 1024, BudgetObserve+1))
	for _, b := range Budgets() {
		require.NotEqual(t, "bt-policy", b.Tag)
	}
}

// At most maxBudgets at once, as the native library and the books table.
func TestBudgetMax(t *testing.T) {
	first := fmt.Sprintf("bt-max/%d", len(Budgets()))
	for i := len(Budgets()); i < maxBudgets; i++ {
		setBudget(t, fmt.Sprintf("bt-max/%d", i), 1<<20, BudgetObserve)
	}
	require.Error(t, SetBudget("bt-max/one-more", 1<<20, BudgetObserve))
	require.NoError(t, SetBudget(first, 2<<20, BudgetFail), "changing one is no new budget")
}

// Realloc charges the growth only; a refused growth returns nil and
// leaves the block as it was, still charged and in the books. (The 1 KiB
// block grows on the grid, Realloc: to 3072 and 2048 bytes, the classes
// of 3000 and 2048 bytes too, so the charges are n's classes'.)
func TestBudgetRealloc(t *testing.T) {
	setBudget(t, "bt-realloc", 2048, BudgetFail)
	b := Malloc(1000, "bt-realloc") // 1 KiB usable
	require.NotNil(t, b)
	require.Equal(t, uint64(1024), usable(1000))
	for i := range b {
		b[i] = byte(i)
	}
	before := statOf(t, "bt-realloc")
	require.Nil(t, Realloc(b, 3000), "3 KiB does not fit in 2 KiB")
	require.Equal(t, before, statOf(t, "bt-realloc"))
	st := budgetOf(t, "bt-realloc")
	require.Equal(t, uint64(1024), st.Charged)
	require.Equal(t, uint64(1), st.Refused)
	for i := range b {
		require.Equal(t, byte(i), b[i])
	}

	// 2 KiB fits, though old and new block are 3 KiB for a moment.
	b = Realloc(b, 2048)
	require.NotNil(t, b)
	require.Equal(t, uint64(2048), budgetOf(t, "bt-realloc").Charged)
	for i := range 1000 {
		require.Equal(t, byte(i), b[i])
	}
	require.Equal(t, uint64(2048), statOf(t, "bt-realloc").LiveBytes)

	b = Realloc(b, 100) // shrinks: the budget gets the difference back
	require.Equal(t, usable(100), budgetOf(t, "bt-realloc").Charged)
	require.Equal(t, usable(100), statOf(t, "bt-realloc").LiveBytes)
	b = Realloc(b, 112) // in place (it fits, and wastes less than half): nothing moves
	require.Equal(t, usable(100), budgetOf(t, "bt-realloc").Charged)
	require.Equal(t, usable(100), statOf(t, "bt-realloc").LiveBytes)
	require.Nil(t, Realloc(b, 1<<20), "large")
	require.Equal(t, uint64(2), budgetOf(t, "bt-realloc").Refused)
	Free(Realloc(b, 0))
	require.Zero(t, budgetOf(t, "bt-realloc").Charged)
	require.Zero(t, statOf(t, "bt-realloc").LiveBytes)
}

// A block grown onto the grid is charged the grid class's bytes, as Free
// will debit them, and a growth whose grid class would pass a fail limit
// is refused though n's class would fit; resizes in place charge nothing.
func TestBudgetReallocGrid(t *testing.T) {
	setBudget(t, "bt-realloc-grid", 2400, BudgetFail)
	b := Malloc(2000, "bt-realloc-grid") // 2048 usable
	require.NotNil(t, b)
	require.Equal(t, uint64(2304), usable(2049))
	require.True(t, Realloc(b, 2049) == nil, "its grid class, 2560 bytes, passes 2400")
	require.Equal(t, uint64(2048), budgetOf(t, "bt-realloc-grid").Charged)
	require.NoError(t, SetBudget("bt-realloc-grid", 4096, BudgetFail))
	b = Realloc(b, 2049)
	require.NotNil(t, b)
	require.Equal(t, uint64(2560), budgetOf(t, "bt-realloc-grid").Charged)
	require.Equal(t, uint64(2560), statOf(t, "bt-realloc-grid").LiveBytes)
	p := unsafe.SliceData(b)
	b = Realloc(b, 2560) // into its room
	require.True(t, p == unsafe.SliceData(b), "grown into its room: moved")
	b = Realloc(b, 1280) // half of it
	require.True(t, p == unsafe.SliceData(b), "shrunk to half: moved")
	require.Equal(t, uint64(2560), budgetOf(t, "bt-realloc-grid").Charged)
	b = Realloc(b, 1279) // below half: moves, and the budget gets the difference back
	require.True(t, p != unsafe.SliceData(b), "shrunk below half: stayed")
	require.Equal(t, usable(1279), budgetOf(t, "bt-realloc-grid").Charged)
	require.Equal(t, usable(1279), statOf(t, "bt-realloc-grid").LiveBytes)
	Free(b)
	require.Zero(t, budgetOf(t, "bt-realloc-grid").Charged)
	require.Zero(t, statOf(t, "bt-realloc-grid").LiveBytes)
}

// A large block's move with room (Realloc) charges the room's pages, its
// growth into them nothing more, and a budget the room passes refuses
// the move even where n alone would fit. (A block in use lies after each:
// they cannot grow where they lie.)
func TestBudgetReallocLargeRoom(t *testing.T) {
	b, next := blockedLarge(t, 600<<10, "bt-realloc-room") // 10 pages of 64 KiB
	c, cnext := blockedLarge(t, 832<<10, "bt-realloc-room")
	defer Free(next)
	defer Free(cnext)
	setBudget(t, "bt-realloc-room", 2<<20, BudgetFail)
	require.Equal(t, uint64(1472<<10), budgetOf(t, "bt-realloc-room").Charged)
	b = Realloc(b, 700<<10) // a quarter more than 640 KiB: 800 KiB, 13 pages
	require.NotNil(t, b)
	require.Equal(t, uint64(1664<<10), budgetOf(t, "bt-realloc-room").Charged)
	require.Equal(t, uint64(1664<<10), statOf(t, "bt-realloc-room").LiveBytes)
	p := unsafe.SliceData(b)
	b = Realloc(b, 832<<10) // into its room
	require.True(t, p == unsafe.SliceData(b), "grown into its room: moved")
	require.Equal(t, uint64(1664<<10), budgetOf(t, "bt-realloc-room").Charged)
	Free(b)
	require.Equal(t, uint64(832<<10), budgetOf(t, "bt-realloc-room").Charged)
	require.NoError(t, SetBudget("bt-realloc-room", 900<<10, BudgetFail))
	require.Less(t, usable(832<<10+1), uint64(900<<10), "n alone would fit")
	require.True(t, Realloc(c, 832<<10+1) == nil, "its room, 1040 KiB in 17 pages, passes 900 KiB")
	require.Equal(t, uint64(832<<10), budgetOf(t, "bt-realloc-room").Charged)
	Free(c)
	require.Zero(t, budgetOf(t, "bt-realloc-room").Charged)
	require.Zero(t, statOf(t, "bt-realloc-room").LiveBytes)
}

// A large block grown where it lies is charged its new pages, first: a
// fail budget they pass refuses, and the block stays as it was, its
// neighbours free; one shrunk where it lies gives its pages' charge back.
// (A huge block's remap: TestReallocHugeChild.)
func TestBudgetReallocInPlace(t *testing.T) {
	setBudget(t, "bt-realloc-inplace", 4<<20, BudgetFail)
	b := Malloc(2<<20, "bt-realloc-inplace")
	require.NotNil(t, b)
	fillAt(b)
	p := unsafe.SliceData(b)
	b = Realloc(b, 600<<10) // its tail goes back: the pages after it are free
	require.True(t, p == unsafe.SliceData(b), "shrunk: moved")
	require.Equal(t, uint64(640<<10), budgetOf(t, "bt-realloc-inplace").Charged)
	require.NoError(t, SetBudget("bt-realloc-inplace", 1<<20, BudgetFail))
	require.True(t, Realloc(b, 1<<20+1) == nil, "17 pages pass 1 MiB")
	require.Equal(t, uint64(640<<10), budgetOf(t, "bt-realloc-inplace").Charged)
	require.Equal(t, uint64(640<<10), statOf(t, "bt-realloc-inplace").LiveBytes)
	checkAt(t, b, 600<<10)
	require.NoError(t, SetBudget("bt-realloc-inplace", 4<<20, BudgetFail))
	b = Realloc(b, 1<<20+1)
	require.True(t, p == unsafe.SliceData(b), "grown into the free pages after it: moved")
	checkAt(t, b, 600<<10)
	require.Equal(t, uint64(1088<<10), budgetOf(t, "bt-realloc-inplace").Charged)

	Free(b)
	require.Zero(t, budgetOf(t, "bt-realloc-inplace").Charged)
	require.Zero(t, statOf(t, "bt-realloc-inplace").LiveBytes)
}

// Realloc under notify crosses as Malloc does, with the growth only.
func TestBudgetReallocNotify(t *testing.T) {
	calls := onBudget(t)
	setBudget(t, "bt-realloc-notify", 4096, BudgetNotify)
	b := Malloc(4096, "bt-realloc-notify")
	require.Empty(t, calls())
	b = Realloc(b, 8192)
	require.Equal(t, []string{"bt-realloc-notify 4096 8192"}, calls())
	require.Equal(t, uint64(8192), budgetOf(t, "bt-realloc-notify").Charged)
	Free(b)
	require.Zero(t, budgetOf(t, "bt-realloc-notify").Charged)
}

// Eight goroutines allocating and freeing at a fail budget's limit: the
// charge never passes it, refusals happen, and in the end the charge and
// the books are the blocks held, to the byte.
func TestBudgetRaceAtLimit(t *testing.T) {
	const limit = 64 << 10
	setBudget(t, "bt-race", limit, BudgetFail)
	state.mu.Lock()
	bu := budgetsByTag["bt-race"]
	state.mu.Unlock()
	iters := 20000
	if testing.Short() {
		iters = 3000
	}
	names := []string{"bt-race", "bt-race/a", "bt-race/a/b", "bt-race/c"}
	held := make([][][]byte, 8)
	var over sync.Once
	var wg sync.WaitGroup
	for g := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range iters {
				if len(held[g]) > 0 && rng.IntN(3) == 0 {
					i := rng.IntN(len(held[g]))
					Free(held[g][i])
					held[g][i] = held[g][len(held[g])-1]
					held[g] = held[g][:len(held[g])-1]
					continue
				}
				n := []int{16, 64, 1000, 4096, 9000}[rng.IntN(5)]
				var b []byte
				if rng.IntN(2) == 0 {
					b = Malloc(n, names[rng.IntN(len(names))])
				} else {
					b = Calloc(n, names[rng.IntN(len(names))])
				}
				if c := bu.charged.Load(); c > limit {
					over.Do(func() { t.Errorf("charged %d past the limit %d", c, limit) })
				}
				if b != nil {
					held[g] = append(held[g], b)
				}
			}
		}()
	}
	wg.Wait()
	var want uint64
	for _, h := range held {
		for _, b := range h {
			want += usable(cap(b))
		}
	}
	var books uint64
	for _, name := range names {
		books += statOf(t, name).LiveBytes
	}
	st := budgetOf(t, "bt-race")
	require.LessOrEqual(t, st.Charged, uint64(limit))
	require.Positive(t, st.Refused)
	require.Positive(t, st.Crossings)
	require.Equal(t, want, books, "the books are the blocks held")
	require.Equal(t, want, st.Charged, "the charge is the blocks held")
	for _, h := range held {
		for _, b := range h {
			Free(b)
		}
	}
	require.Zero(t, budgetOf(t, "bt-race").Charged)
}

// The notify callback under racing goroutines runs once per crossing:
// the callbacks are the crossings counted.
func TestBudgetNotifyRace(t *testing.T) {
	var mu sync.Mutex
	n := 0
	OnBudget(func(string, uint64, uint64) { mu.Lock(); n++; mu.Unlock() })
	t.Cleanup(func() { OnBudget(nil) })
	setBudget(t, "bt-notify-race", 4<<10, BudgetNotify) // one goroutine's 5 blocks cross it
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 8))
			var held [][]byte
			for range 2000 {
				if len(held) > 4 || (len(held) > 0 && rng.IntN(2) == 0) {
					Free(held[len(held)-1])
					held = held[:len(held)-1]
					continue
				}
				held = append(held, Malloc(1024, "bt-notify-race"))
			}
			for _, b := range held {
				Free(b)
			}
		}()
	}
	wg.Wait()
	st := budgetOf(t, "bt-notify-race")
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, st.Crossings)
	require.Equal(t, st.Crossings, uint64(n))
	require.Zero(t, st.Charged)
}

// The example of docs/budgets-go.md.
func ExampleSetBudget() {
	// At most 1 MiB live under example/gfx, refused past it; the
	// parser's growth is only reported.
	if err := SetBudget("example/gfx", 1<<20, BudgetFail); err != nil {
		panic(err)
	}
	defer SetBudget("example/gfx", 0, BudgetFail)
	_ = SetBudget("example/parser", 64<<10, BudgetNotify)
	defer SetBudget("example/parser", 0, BudgetFail)
	OnBudget(func(tag string, limit, charged uint64) {
		fmt.Printf("over budget: %s has %d of %d bytes\n", tag, charged, limit)
	})
	defer OnBudget(nil)

	tex := MustTag("example/gfx/textures")
	var held [][]byte
	for {
		b := tex.Malloc(256 << 10)
		if b == nil { // refused: the budget is full
			break
		}
		held = append(held, b)
	}
	held = append(held, Malloc(100<<10, "example/parser")) // crosses: the callback runs

	for _, st := range Budgets() {
		fmt.Printf("%s: %d of %d bytes (%s), %d refused, %d crossings\n",
			st.Tag, st.Charged, st.Limit, st.Policy, st.Refused, st.Crossings)
	}
	for _, b := range held {
		Free(b)
	}
	// Output:
	// over budget: example/parser has 106496 of 65536 bytes
	// example/gfx: 1048576 of 1048576 bytes (fail), 1 refused, 1 crossings
	// example/parser: 106496 of 65536 bytes (notify), 0 refused, 1 crossings
}
