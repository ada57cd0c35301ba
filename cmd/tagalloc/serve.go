package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tagalloc/tagalloc/reporter"
)

// server serves a live view of reports taken by snap: Prometheus metrics,
// pprof heap profiles (when the report has stacks), the report as JSON,
// per-tag history, and a page that draws it.
type server struct {
	snap    func() (*reporter.Report, error)
	mu      sync.Mutex
	history []historyPoint // the newest last, at most historyMax
}

type historyPoint struct {
	T    int64             `json:"t"`    // unix milliseconds
	Live map[string]uint64 `json:"live"` // "pid/tag" -> live bytes
}

const historyMax = 3600

func (s *server) sample() {
	rep, err := s.snap()
	if err != nil {
		return
	}
	pt := historyPoint{T: time.Now().UnixMilli(), Live: map[string]uint64{}}
	for _, p := range rep.Processes {
		for _, t := range p.Tags {
			pt.Live[strconv.Itoa(p.PID)+"/"+t.Name] = t.LiveBytes
		}
	}
	s.mu.Lock()
	s.history = append(s.history, pt)
	if len(s.history) > historyMax {
		s.history = s.history[len(s.history)-historyMax:]
	}
	s.mu.Unlock()
}

// Describe and Collect make the server a Prometheus collector of the
// current report.
var (
	descLive       = prometheus.NewDesc("tagalloc_tag_live_bytes", "Usable bytes of the tag's live heap blocks.", []string{"pid", "command", "tag"}, nil)
	descLiveBlocks = prometheus.NewDesc("tagalloc_tag_live_blocks", "The tag's live heap blocks.", []string{"pid", "command", "tag"}, nil)
	descAlloc      = prometheus.NewDesc("tagalloc_tag_alloc_bytes_total", "Usable bytes ever allocated under the tag.", []string{"pid", "command", "tag"}, nil)
	descAllocN     = prometheus.NewDesc("tagalloc_tag_alloc_blocks_total", "Blocks ever allocated under the tag.", []string{"pid", "command", "tag"}, nil)
	descMapped     = prometheus.NewDesc("tagalloc_heap_mapped_bytes", "Memory the allocator has from the OS for the heap.", []string{"pid", "command"}, nil)
)

func (s *server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLive, descLiveBlocks, descAlloc, descAllocN, descMapped} {
		ch <- d
	}
}

func (s *server) Collect(ch chan<- prometheus.Metric) {
	rep, err := s.snap()
	if err != nil {
		return
	}
	for _, p := range rep.Processes {
		pid, cmd := strconv.Itoa(p.PID), ""
		if len(p.Command) > 0 {
			cmd = p.Command[0]
		}
		for _, t := range p.Tags {
			ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(t.LiveBytes), pid, cmd, t.Name)
			ch <- prometheus.MustNewConstMetric(descLiveBlocks, prometheus.GaugeValue, float64(t.LiveBlocks), pid, cmd, t.Name)
			ch <- prometheus.MustNewConstMetric(descAlloc, prometheus.CounterValue, float64(t.AllocBytes), pid, cmd, t.Name)
			ch <- prometheus.MustNewConstMetric(descAllocN, prometheus.CounterValue, float64(t.AllocBlocks), pid, cmd, t.Name)
		}
		ch <- prometheus.MustNewConstMetric(descMapped, prometheus.GaugeValue, float64(p.Heap.MappedBytes), pid, cmd)
	}
}

func (s *server) handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.pprofRoutes(mux)
	mux.HandleFunc("/api/report", func(w http.ResponseWriter, r *http.Request) {
		rep, err := s.snap()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = rep.WriteJSON(w)
	})
	mux.HandleFunc("/api/history", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := append([]historyPoint(nil), s.history...)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	})
	return mux
}

// serve listens on addr and serves until stop is closed (or the listener
// fails), sampling the history every interval.
func (s *server) serve(addr string, interval time.Duration, stop <-chan struct{}, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		s.sample()
		for {
			select {
			case <-stop:
				srv.Close()
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveCmd: tagalloc serve [--addr A] [--interval D] PID — a running
// process's tags, live (its books, as snapshot reads them).
func serveCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("serve")
	addr := fs.String("addr", "127.0.0.1:6060", "listen on `ADDRESS` (loopback unless told otherwise; port 0: any free port)")
	interval := fs.Duration("interval", time.Second, "`DURATION` between the history's samples")
	pos, err := parse(fs, args, stdout)
	if err == nil {
		err = wantArgs("serve", pos, 1)
	}
	if err == nil && *interval <= 0 {
		err = usagef("serve", "--interval %v: a duration above zero", *interval)
	}
	var pid int
	if err == nil {
		pid, err = pidArgument("serve", pos[0])
	}
	if err != nil {
		return usageExit(err)
	}
	if _, err := readOwnProcess(pid, "serve"); err != nil {
		return 1, fmt.Errorf("serve: %w", err)
	}
	s := &server{snap: func() (*reporter.Report, error) {
		snap, err := readOwnProcess(pid, "serve")
		if err != nil {
			return nil, err
		}
		p := reporter.FromSnapshot(snap)
		return &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{p}}, nil
	}}
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() { <-sigs; close(stop) }()
	err = s.serve(*addr, *interval, stop, func(a net.Addr) {
		fmt.Fprintf(stdout, "tagalloc: serving process %d on http://%s/ (metrics: /metrics)\n", pid, a)
	})
	if err != nil {
		return 1, fmt.Errorf("serve: %w", err)
	}
	return 0, nil
}

// page draws the per-tag history (one line per pid/tag) and the current
// table, refreshed every second; no outside scripts.
const page = `<!doctype html>
<html><head><meta charset="utf-8"><title>tagalloc</title>
<style>
body { font: 14px sans-serif; margin: 20px; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
</style></head>
<body>
<h1>tagalloc: live bytes per tag</h1>
<svg id="chart" width="900" height="300" style="border:1px solid #ccc"></svg>
<table id="tags"><thead><tr><th>pid/tag</th><th>live</th></tr></thead><tbody></tbody></table>
<p><a href="/metrics">/metrics</a> · <a href="/api/report">/api/report</a> · <a href="/debug/pprof/heap">/debug/pprof/heap</a> (with --stacks)</p>
<script>
const colors = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf"];
function human(b) { const u = ["B","KiB","MiB","GiB","TiB"]; let i = 0; while (b >= 1024 && i < 4) { b /= 1024; i++; } return b.toFixed(i ? 1 : 0) + " " + u[i]; }
async function refresh() {
  const h = await (await fetch("/api/history")).json();
  const svg = document.getElementById("chart"), W = 900, H = 300;
  svg.replaceChildren();
  if (!h.length) return;
  const keys = [...new Set(h.flatMap(p => Object.keys(p.live)))];
  const max = Math.max(1, ...h.flatMap(p => Object.values(p.live)));
  const t0 = h[0].t, t1 = Math.max(h[h.length - 1].t, t0 + 1);
  keys.forEach((k, i) => {
    const pts = h.filter(p => k in p.live).map(p => ((p.t - t0) / (t1 - t0) * (W - 10) + 5).toFixed(1) + "," + (H - 5 - p.live[k] / max * (H - 10)).toFixed(1));
    const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    pl.setAttribute("points", pts.join(" ")); pl.setAttribute("fill", "none"); pl.setAttribute("stroke", colors[i % colors.length]); pl.setAttribute("stroke-width", "2");
    svg.appendChild(pl);
  });
  const last = h[h.length - 1].live, body = document.querySelector("#tags tbody");
  // Tag names come from the measured program: they are text, never markup.
  body.replaceChildren(...[...keys].sort((a, b) => (last[b] || 0) - (last[a] || 0)).map(k => {
    const tr = document.createElement("tr"), name = document.createElement("td"), live = document.createElement("td");
    name.style.color = colors[keys.indexOf(k) % colors.length];
    name.textContent = k;
    live.textContent = human(last[k] || 0);
    tr.append(name, live);
    return tr;
  }));
}
refresh(); setInterval(refresh, 1000);
</script></body></html>
`
