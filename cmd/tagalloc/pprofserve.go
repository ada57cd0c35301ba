// /debug/pprof/ for tagalloc serve and run --serve: the heap profiles of
// the stacks, where net/http/pprof serves a Go program's, so
// `go tool pprof http://ADDRESS/debug/pprof/heap` works as for Go.

package main

import (
	"bytes"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/tagalloc/tagalloc/reporter"
)

// pprofProfiles are the profiles served, each with the sample type pprof
// shows first ("" keeps the report's: inuse_space; when nothing sampled is
// live, peak_space, or alloc_space without a peak).
var pprofProfiles = []pprofEndpoint{
	{"heap", "", "live heap blocks by allocating stack (inuse_space; alloc_space too)"},
	{"allocs", reporter.AllocSpace, "every block allocated, by stack (alloc_space; inuse_space too)"},
}

type pprofEndpoint struct{ Name, DefaultType, About string }

func (s *server) pprofRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", s.pprofIndex)
	mux.HandleFunc("/debug/pprof/ui/", s.pprofWeb)
	for _, p := range pprofProfiles {
		mux.HandleFunc("/debug/pprof/"+p.Name, func(w http.ResponseWriter, r *http.Request) {
			s.pprofProfile(w, r, p.Name, p.DefaultType)
		})
	}
}

// pprofProfile serves one profile: every process merged (a pid label on
// each sample), or the one of ?pid=N; ?debug=1 gives pprof's text form.
func (s *server) pprofProfile(w http.ResponseWriter, r *http.Request, name, defaultType string) {
	pid, err := strconv.Atoi(r.URL.Query().Get("pid"))
	if r.URL.Query().Get("pid") == "" {
		pid, err = 0, nil
	}
	if err != nil || pid < 0 {
		http.Error(w, "pid: not a process id", http.StatusBadRequest)
		return
	}
	rep, err := s.snap()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	prof, err := rep.Profile(pid)
	if err != nil {
		http.Error(w, err.Error()+" (tagalloc run --stacks sampled --serve ADDRESS)", http.StatusNotFound)
		return
	}
	if defaultType != "" {
		prof.DefaultSampleType = defaultType
	}
	writeProfile(w, r, name, prof)
}

// pprofWeb serves pprof's web UI on the current profile of every
// process, built anew for each request (the processes run on).
func (s *server) pprofWeb(w http.ResponseWriter, r *http.Request) {
	rep, err := s.snap()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	prof, err := rep.Profile(0)
	if err != nil {
		http.Error(w, err.Error()+" (tagalloc run --stacks sampled --serve ADDRESS)", http.StatusNotFound)
		return
	}
	handlers, err := pprofHandlers(prof)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	mountHandlers(w, r, "/debug/pprof/ui/", handlers)
}

// writeProfile writes prof as net/http/pprof does: gzipped protobuf, an
// attachment named after the profile.
func writeProfile(w http.ResponseWriter, r *http.Request, name string, prof *profile.Profile) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if d := r.URL.Query().Get("debug"); d != "" && d != "0" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(prof.String()))
		return
	}
	var b bytes.Buffer
	if err := prof.Write(&b); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	_, _ = w.Write(b.Bytes())
}

// pprofIndexData is what the index page shows.
type pprofIndexData struct {
	Profiles  []pprofEndpoint
	Processes []pprofProcess
	Err       string
}

type pprofProcess struct {
	PID     int
	Command string
	Stacks  bool
}

func (s *server) pprofIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/debug/pprof/" {
		http.NotFound(w, r)
		return
	}
	d := pprofIndexData{Profiles: pprofProfiles}
	if rep, err := s.snap(); err != nil {
		d.Err = err.Error()
	} else {
		for _, p := range rep.Processes {
			d.Processes = append(d.Processes, pprofProcess{p.PID, strings.Join(p.Command, " "), p.Stacks != nil})
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_ = pprofIndexPage.Execute(w, d)
}

// pprofIndexPage: html/template escapes every value (commands and errors
// come from the measured programs).
var pprofIndexPage = template.Must(template.New("index").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>/debug/pprof/</title></head>
<body>
<h1>/debug/pprof/</h1>
<p>Heap profiles of the sampled stacks (tagalloc run --stacks), for <code>go tool pprof http://HOST/debug/pprof/heap</code>.
Every process is merged, each sample labelled with its pid; <code>?pid=N</code> keeps one.</p>
<table>
{{range .Profiles}}<tr><td><a href="{{.Name}}">{{.Name}}</a></td><td>{{.About}}</td></tr>
{{end}}<tr><td><a href="ui/">ui</a></td><td>pprof's web UI on the heap profile: flame graph, top, graph, source</td></tr>
</table>
<h2>Processes</h2>
{{if .Err}}<p>{{.Err}}</p>{{end}}
<table>
<tr><th>pid</th><th>command</th><th>stacks</th></tr>
{{range .Processes}}<tr><td>{{.PID}}</td><td>{{.Command}}</td>
<td>{{if .Stacks}}<a href="heap?pid={{.PID}}">heap</a> <a href="allocs?pid={{.PID}}">allocs</a>{{else}}none (run with --stacks){{end}}</td></tr>
{{end}}</table>
</body></html>
`))
