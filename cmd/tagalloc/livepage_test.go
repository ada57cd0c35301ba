package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// hostileTags are testdata/hostile_tags.c's tag names, in its order.
var hostileTags = []string{
	"<img src=x onerror=document.title='pwned'>",
	`"quoted" 'single' & back\slash`,
	"\u202eevil\u202c bidi \u2066iso\u2069",
	"</script><script>alert(1)</script>",
	`{tag="x",pid="1"} 1`,
	"plain",
}

// hostileTagsRun is tagalloc run --serve on testdata/hostile_tags.c, waiting.
type hostileTagsRun struct {
	addr  string            // http://127.0.0.1:PORT
	pid   string            // the program's
	books map[string]uint64 // tag -> live bytes, as the program's library says
}

// startHostileTags runs testdata/hostile_tags.c under tagalloc run --serve on
// a free port (with stacks sampled at 4 KiB, when stacks), until the test
// ends.
func startHostileTags(t *testing.T, stacks bool) hostileTagsRun {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "hostile_tags")
	b, err := exec.Command("cc", "-O1", "-fno-builtin", "-o", prog, filepath.Join("testdata", "hostile_tags.c")).CombinedOutput()
	require.NoError(t, err, "%s", b)
	bin, err := tagallocBin()
	require.NoError(t, err)
	mode := "off"
	if stacks {
		mode = "sampled"
	}
	cmd := exec.Command(bin, "run", "-q", "--stacks", mode, "--serve", "127.0.0.1:0", "--", prog)
	cmd.Dir = dir // where run saves its report
	cmd.Env = append(os.Environ(), "TAGALLOC_SAMPLE_RATE=4K")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "serving on "); ok {
				addrc <- strings.TrimSuffix(strings.Fields(a)[0], "/")
			}
		}
	}()
	r := hostileTagsRun{books: map[string]uint64{}}
	sc := bufio.NewScanner(stdout)
	for r.pid == "" && sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "books":
			i, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			n, err := strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
			r.books[hostileTags[i]] = n
		case len(f) == 2 && f[0] == "ready":
			r.pid = f[1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	require.NotEmpty(t, r.pid, "the program did not say ready")
	require.Len(t, r.books, len(hostileTags), "the program's books: every tag")
	select {
	case r.addr = <-addrc:
	case <-time.After(30 * time.Second):
		t.Fatal("tagalloc run did not say where it serves")
	}
	return r
}

// waitHistory waits (up to 10 s) until /api/history's newest point holds
// every hostile tag (and, when libraries, an estimate per library).
func (r hostileTagsRun) waitHistory(t *testing.T, libraries bool) {
	t.Helper()
	for i := 0; i < 200; i++ {
		var h []historyPoint
		require.NoError(t, json.Unmarshal(get(t, r.addr+"/api/history"), &h))
		if n := len(h); n >= 2 {
			ok := !libraries || len(h[n-1].Libraries) > 0
			for _, tag := range hostileTags {
				ok = ok && h[n-1].Live[r.pid+"/"+tag] == r.books[tag]
			}
			if ok {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the history never held every tag's books")
}

func needChromium(t *testing.T) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (.ci/run installs it)")
		}
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	return chromium
}

// dumpDOM is the page at url after its script has run, as headless
// Chromium serializes it.
func dumpDOM(t *testing.T, chromium, url string) string {
	t.Helper()
	out, err := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--window-size=1000,1200", "--virtual-time-budget=3000", "--dump-dom", url).Output()
	require.NoError(t, err)
	return string(out)
}

// textEscape is s as the DOM serializer writes a text node.
func textEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\u00a0", "&nbsp;").Replace(s)
}

// The live page in headless Chromium, on a program whose tag names are
// markup, script, quotes and bidi controls: every name is text in the
// table, the legend and the hover box, no element comes of one, and the
// chart has its axes (with units and times), legend and hover elements;
// per library, the library series and the top stacks.
func TestServePageHostileTagsInChromium(t *testing.T) {
	chromium := needChromium(t)
	r := startHostileTags(t, true)
	r.waitHistory(t, true)
	dom := dumpDOM(t, chromium, r.addr+"/")
	body := pageBody(t, dom)
	has := func(want, what string) {
		t.Helper()
		if !strings.Contains(body, want) {
			t.Errorf("%s: the page lacks %q", what, want)
		}
	}
	hasNot := func(bad, what string) {
		t.Helper()
		if strings.Contains(body, bad) {
			t.Errorf("%s: the page has %q", what, bad)
		}
	}
	matches := func(re, what string) {
		t.Helper()
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("%s: nothing on the page matches %s", what, re)
		}
	}

	for _, tag := range hostileTags {
		has(`<td class="name"><span class="swatch" style="background: rgb(`, "the tags table's swatches")
		has(`</span>`+textEscape(r.pid+"/"+tag)+`</td>`, "the tags table and hover box have the name as text")
		has(`<span class="legend-name">`+textEscape(r.pid+"/"+tag)+`</span>`, "the legend has the name as text")
		has(`<td class="name">`+textEscape(r.pid+"/"+tag)+`</td>`, "the top stacks have the name as text")
	}
	hasNot("<img", "a tag name became an element")
	hasNot("<script>alert", "a tag name became an element")
	if n := strings.Count(dom, "<script"); n != 1 {
		t.Errorf("%d script elements: the page's own only", n)
	}
	if !strings.Contains(dom, "<title>tagalloc: live heap</title>") {
		t.Error("the title changed: a tag's script ran")
	}

	// axes: titles, byte ticks with binary units, clock times
	for _, id := range []string{`id="xaxis"`, `id="yaxis"`, `id="legend"`, `id="hover"`, `id="cursor"`, `id="overlay"`} {
		has(id, "the chart's parts")
	}
	has(`class="axis-title"`, "axis titles")
	has(">live bytes</text>", "the byte axis's title")
	has(">time (local, hh:mm:ss)</text>", "the time axis's title")
	matches(`<text class="tick"[^>]*>\d+(\.\d+)? (KiB|MiB)</text>`, "byte ticks with units")
	matches(`<text class="tick"[^>]*>\d\d:\d\d:\d\d</text>`, "time ticks")
	if n := strings.Count(body, `<li class="legend-item">`); n != len(hostileTags)+1 {
		t.Errorf("%d legend items, want one per series (with untagged): %d", n, len(hostileTags)+1)
	}
	if n := strings.Count(body, `<polyline `); n != len(hostileTags)+1 {
		t.Errorf("%d lines, want one per series: %d", n, len(hostileTags)+1)
	}
	// the hover box holds the values at a time (the newest, until the
	// pointer moves it), each series' colour, name and value
	has(`<div class="hover-time">`, "the hover box's time")
	largest := hostileTags[len(hostileTags)-1]
	has(`<td class="name"><span class="swatch" style="background: rgb(31, 119, 180);"></span>`+textEscape(r.pid+"/"+largest)+`</td><td class="hover-value">`+humanKiB(r.books[largest])+`</td>`, "the hover box's first value")
	// stacks: the top stacks' frames, libraries, the flame graph's link
	has(`<a id="flamegraph" href="/debug/pprof/ui/">`, "the flame graph's link")
	matches(`<li class="frame">main `, "the top stacks' frames")
	matches(`<table id="libraries">.*<tbody><tr><td class="name">[^<]*`+regexp.QuoteMeta(r.pid+"/hostile_tags")+`</td>`, "the libraries table")

	lib := pageBody(t, dumpDOM(t, chromium, r.addr+"/?view=library"))
	for _, want := range []string{`id="view-library" aria-pressed="true"`, ">live bytes (estimated)</text>",
		`<span class="legend-name">` + r.pid + `/hostile_tags</span>`, `<polyline `} {
		if !strings.Contains(lib, want) {
			t.Errorf("per library: the page lacks %q", want)
		}
	}
	if strings.Contains(lib, "<img") {
		t.Error("per library: a tag name became an element")
	}
	if t.Failed() {
		t.Logf("the page per tag:\n%s\nper library:\n%s", body, lib)
	}

	// the flame graph the page links to
	require.Contains(t, string(get(t, r.addr+"/debug/pprof/ui/flamegraph")), "<html")
}

// pageBody is dom's body without the page's own script.
func pageBody(t *testing.T, dom string) string {
	t.Helper()
	i := strings.Index(dom, "<body")
	require.GreaterOrEqual(t, i, 0, "no body: %s", dom)
	body := dom[i:]
	if j := strings.LastIndex(body, "<script>"); j >= 0 {
		body = body[:j]
	}
	return body
}

// humanKiB is the page's human() for n < 1 MiB of whole KiB.
func humanKiB(n uint64) string {
	return strconv.FormatFloat(float64(n)/1024, 'f', 1, 64) + " KiB"
}

// Without stacks the page says so, and draws the tags.
func TestServePageNoStacksInChromium(t *testing.T) {
	chromium := needChromium(t)
	r := startHostileTags(t, false)
	r.waitHistory(t, false)
	body := pageBody(t, dumpDOM(t, chromium, r.addr+"/?view=library"))
	require.Contains(t, body, "No stacks: per-library figures need tagalloc run --stacks sampled.")
	require.Contains(t, body, "Stacks are off")
	require.Contains(t, body, `<table id="stacks">`)
	require.NotContains(t, body, `<li class="frame">`)
	require.NotContains(t, body, "<img")
}

// The page's script writes no markup: no HTML sink anywhere, and the
// Content-Security-Policy runs only that script (by its hash).
func TestServePageScriptWritesNoMarkup(t *testing.T) {
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(", "setAttribute(\"on", "srcdoc", "createContextualFragment", "DOMParser"} {
		require.NotContains(t, pageScript, sink)
		require.NotContains(t, pageHead+pageTail, sink)
	}
	require.NotContains(t, pageHead, "<script src")
	s := &server{snap: func() (*reporter.Report, error) { return hostileReport(), nil }}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, pageHead+pageScript+pageTail, string(b))
	sum := sha256.Sum256([]byte(pageScript))
	csp := resp.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	require.Contains(t, csp, "default-src 'none'")
	require.NotContains(t, csp, "unsafe-eval")
	scriptSrc, _, _ := strings.Cut(strings.Split(csp, "script-src")[1], ";")
	require.NotContains(t, scriptSrc, "unsafe")
}

// hostileReport: two processes with hostile tag, command and library
// names, invalid UTF-8 among them, and two names that become one.
func hostileReport() *reporter.Report {
	req := uint64(100)
	p := reporter.Process{PID: 42, Command: []string{"/bin/x\"y\\z\n<b>"}, Ended: "running",
		Heap: reporter.Heap{LiveBytes: 3000, MappedBytes: 1 << 20, FreeCachedBytes: 4096, BookkeepingBytes: 8192, SpanFreeBytes: 77}}
	for i, n := range hostileTags {
		p.Tags = append(p.Tags, reporter.Tag{Name: n, LiveBytes: uint64(1000 * (i + 1)), LiveBlocks: 1, AllocBytes: 5000, AllocBlocks: 2, PeakLiveBytes: 9000, LiveRequestedBytes: &req})
	}
	p.Tags = append(p.Tags, reporter.Tag{Name: "bad\xffutf8", LiveBytes: 1}, reporter.Tag{Name: "bad\xfeutf8", LiveBytes: 2})
	p.Stacks = &reporter.Stacks{Mode: "sampled", SampleRate: 4096, Libraries: []reporter.LibraryTotals{
		{Name: "/lib/<i>lib\".so", LiveBytes: 500, LiveBlocks: 5, AllocBytes: 600},
		{Name: "/lib/\xfflib.so", LiveBytes: 10, AllocBytes: 20},
		{Name: "/lib/\xfelib.so", LiveBytes: 30, AllocBytes: 40},
	}, Records: []reporter.StackRecord{{Tag: hostileTags[0], Library: "/lib/<i>lib\".so", LiveBytes: 500,
		Frames: []reporter.Frame{{Function: "<svg onload=alert(1)>", File: "/src/\u202eevil.c", Line: 3, Module: "m"}}}}}
	return &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{p}}
}

// /metrics with hostile names: every label value escaped as the text
// format says (by the Prometheus client), invalid UTF-8 made valid (and
// series that then coincide summed) rather than failing the scrape, and
// the dashboard's figures there.
func TestMetricsHostileNames(t *testing.T) {
	s := &server{snap: func() (*reporter.Report, error) { return hostileReport(), nil }}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	m := string(get(t, ts.URL+"/metrics"))
	cmd := `command="/bin/x\"y\\z\n<b>"`
	for _, want := range []string{
		`tagalloc_tag_live_bytes{` + cmd + `,pid="42",tag="<img src=x onerror=document.title='pwned'>"} 1000`,
		`tagalloc_tag_live_bytes{` + cmd + `,pid="42",tag="\"quoted\" 'single' & back\\slash"} 2000`,
		`tagalloc_tag_live_bytes{` + cmd + `,pid="42",tag="` + hostileTags[2] + `"} 3000`,
		`tagalloc_tag_live_bytes{` + cmd + `,pid="42",tag="{tag=\"x\",pid=\"1\"} 1"} 5000`,
		`tagalloc_tag_live_bytes{` + cmd + `,pid="42",tag="bad` + "\ufffd" + `utf8"} 3`,
		`tagalloc_tag_peak_live_bytes_lower_bound{` + cmd + `,pid="42",tag="plain"} 9000`,
		`tagalloc_tag_live_requested_bytes{` + cmd + `,pid="42",tag="plain"} 100`,
		`tagalloc_heap_free_cached_bytes{` + cmd + `,pid="42"} 4096`,
		`tagalloc_heap_bookkeeping_bytes{` + cmd + `,pid="42"} 8192`,
		`tagalloc_heap_span_free_bytes{` + cmd + `,pid="42"} 77`,
		`tagalloc_stacks_sample_rate_bytes{` + cmd + `,pid="42"} 4096`,
		`tagalloc_library_estimated_live_bytes{` + cmd + `,library="/lib/<i>lib\".so",pid="42"} 500`,
		`tagalloc_library_estimated_live_bytes{` + cmd + `,library="/lib/` + "\ufffd" + `lib.so",pid="42"} 40`,
		`tagalloc_library_estimated_alloc_bytes_total{` + cmd + `,library="/lib/` + "\ufffd" + `lib.so",pid="42"} 60`,
		"# HELP tagalloc_tag_peak_live_bytes_lower_bound A lower bound",
		"# HELP tagalloc_library_estimated_live_bytes An estimate",
	} {
		if !strings.Contains(m, want+"\n") && !(strings.HasPrefix(want, "# HELP") && strings.Contains(m, want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", m)
	}
	// /api/live carries the same names, as JSON strings
	var v liveView
	require.NoError(t, json.Unmarshal(get(t, ts.URL+"/api/live"), &v))
	require.Len(t, v.Processes, 1)
	require.Equal(t, hostileTags[0], v.Processes[0].Tags[0].Name)
	require.Equal(t, "<svg onload=alert(1)> (/src/\u202eevil.c:3) [m +0x0]", v.Processes[0].Stacks.Top[0].Frames[0])
}

// needProg finds a program the test needs, or skips the test (fails it
// when CI=true: .ci/run installs them all), as cgo's lookProgs does.
func needProg(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (CI must install it: .ci/run installs Debian's %s): %v", name, pkg, err)
		}
		t.Skipf("%s is not installed (apt-get install %s): %v", name, pkg, err)
	}
	return p
}

// A real Prometheus scrapes tagalloc run --serve: tagalloc_tag_live_bytes,
// queried through Prometheus's HTTP API, equals the books the program's
// own library reports, for every tag, hostile names included (so
// Prometheus parsed their escaping back to the very names); the
// dashboard's other figures are there too.
func TestPrometheusScrapesRunServe(t *testing.T) {
	prom := needProg(t, "prometheus", "prometheus")
	r := startHostileTags(t, true)
	r.waitHistory(t, true)
	target := strings.TrimPrefix(r.addr, "http://")

	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tagalloc
    static_configs:
      - targets: ['`+target+`']
`), 0o644))
	var api string
	for attempt := 0; api == "" && attempt < 3; attempt++ {
		port := freePort(t)
		cmd := exec.Command(prom, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"+strconv.Itoa(attempt)),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--log.level=warn")
		log, err := os.Create(filepath.Join(dir, "prometheus"+strconv.Itoa(attempt)+".log"))
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			log.Close()
		})
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		for i := 0; i < 300 && api == ""; i++ {
			select {
			case <-exited: // the port was taken meanwhile: another
				b, _ := os.ReadFile(log.Name())
				t.Logf("prometheus exited at start:\n%s", b)
				i = 300
				continue
			case <-time.After(100 * time.Millisecond):
			}
			if resp, err := http.Get(base + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					api = base
				}
			}
		}
	}
	require.NotEmpty(t, api, "prometheus did not start")

	// wait until Prometheus has scraped the tags (at most 60 s)
	var res []promSample
	for i := 0; i < 240; i++ {
		res = promQuery(t, api, `tagalloc_tag_live_bytes{job="tagalloc",pid="`+r.pid+`"}`)
		if len(res) >= len(hostileTags) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	got := map[string]uint64{}
	for _, s := range res {
		require.Equal(t, target, s.Metric["instance"])
		require.Equal(t, r.pid, s.Metric["pid"])
		got[s.Metric["tag"]] = s.value(t)
	}
	for _, tag := range hostileTags {
		v, ok := got[tag]
		require.True(t, ok, "Prometheus has no series for tag %q; it has %q", tag, got)
		require.Equal(t, r.books[tag], v, "tag %q: Prometheus's figure against the books", tag)
	}
	require.Equal(t, "1", promQuery(t, api, `up{job="tagalloc"}`)[0].Value[1].(string))

	one := func(q string) uint64 {
		res := promQuery(t, api, q)
		require.Len(t, res, 1, "%s", q)
		return res[0].value(t)
	}
	pidSel := `{pid="` + r.pid + `"}`
	require.Greater(t, one("tagalloc_heap_bookkeeping_bytes"+pidSel), uint64(0))
	require.GreaterOrEqual(t, one("tagalloc_heap_mapped_bytes"+pidSel), one("tagalloc_heap_live_bytes"+pidSel))
	_ = one("tagalloc_heap_free_cached_bytes" + pidSel)
	require.Equal(t, uint64(4096), one("tagalloc_stacks_sample_rate_bytes"+pidSel))
	for _, tag := range hostileTags {
		sel := `{pid="` + r.pid + `",tag=` + strconv.Quote(tag) + `}`
		require.GreaterOrEqual(t, one("tagalloc_tag_peak_live_bytes_lower_bound"+sel), r.books[tag], "peak of %q", tag)
	}
	var est uint64
	for _, s := range promQuery(t, api, "tagalloc_library_estimated_live_bytes"+pidSel) {
		est += s.value(t)
	}
	var total uint64
	for _, v := range r.books {
		total += v
	}
	require.InDelta(t, float64(total), float64(est), 0.5*float64(total), "the libraries' estimates against the books")
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"` // [unix seconds, "value"]
}

func (s promSample) value(t *testing.T) uint64 {
	t.Helper()
	require.Len(t, s.Value, 2)
	f, err := strconv.ParseFloat(s.Value[1].(string), 64)
	require.NoError(t, err)
	return uint64(f)
}

// promQuery runs an instant query through Prometheus's HTTP API.
func promQuery(t *testing.T, api, q string) []promSample {
	t.Helper()
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(get(t, api+"/api/v1/query?query="+url.QueryEscape(q)), &resp))
	require.Equal(t, "success", resp.Status, resp.Error)
	require.Equal(t, "vector", resp.Data.ResultType)
	return resp.Data.Result
}

// freePort is a TCP port on 127.0.0.1 free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
