package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// hostileServer serves a report whose command and tag are markup.
func hostileServer(t *testing.T) *httptest.Server {
	t.Helper()
	st := fixtureStacks(2048)
	st.Records[0].Tag = `<img src=x onerror=alert(1)>`
	rep := &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{
		{PID: 100, Command: []string{`<script>alert("cmd")</script>`}, Stacks: st},
		{PID: 101, Command: []string{"plain"}},
	}}
	s := &server{snap: func() (*reporter.Report, error) { return rep, nil }}
	srv := httptest.NewServer(s.handler())
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// The index lists the profiles and the processes, every string from the
// measured program escaped.
func TestPprofIndexEscapes(t *testing.T) {
	srv := hostileServer(t)
	resp, body := fetch(t, srv.URL+"/debug/pprof/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.NotContains(t, body, "<script>alert")
	require.Contains(t, body, "&lt;script&gt;alert(&#34;cmd&#34;)&lt;/script&gt;")
	require.Contains(t, body, `<a href="heap?pid=100">heap</a>`)
	require.Contains(t, body, "none (run with --stacks)", "process 101 has no stacks")
	resp, _ = fetch(t, srv.URL+"/debug/pprof/nothing")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// heap and allocs: gzipped protobuf as net/http/pprof serves it; ?pid
// chooses a process, and a bad one is refused.
func TestPprofEndpoints(t *testing.T) {
	srv := hostileServer(t)
	for name, def := range map[string]string{"heap": reporter.InuseSpace, "allocs": reporter.AllocSpace} {
		resp, body := fetch(t, srv.URL+"/debug/pprof/"+name)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
		require.Equal(t, []byte{0x1f, 0x8b}, []byte(body[:2]), "gzipped")
		prof, err := profile.Parse(strings.NewReader(body))
		require.NoError(t, err)
		require.Equal(t, def, prof.DefaultSampleType)
		require.Equal(t, []string{`<img src=x onerror=alert(1)>`}, prof.Sample[0].Label["tag"], "data, kept as it is")
		require.Equal(t, []int64{100}, prof.Sample[0].NumLabel["pid"])
	}
	for query, status := range map[string]int{"?pid=100": 200, "?pid=101": 404, "?pid=7": 404, "?pid=x": 400, "?debug=1": 200} {
		resp, body := fetch(t, srv.URL+"/debug/pprof/heap"+query)
		require.Equal(t, status, resp.StatusCode, "%s: %s", query, body)
	}
	resp, body := fetch(t, srv.URL+"/debug/pprof/heap?debug=1")
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.Contains(t, body, "make_texture")
}

// /debug/pprof/ui/ is pprof's own web UI on the live profile, its links
// relative to the mount; markup in the data stays text.
func TestPprofWebUIMounted(t *testing.T) {
	srv := hostileServer(t)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.URL + "/debug/pprof/ui/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	require.Equal(t, "flamegraph", resp.Header.Get("Location"), "relative: stays under the mount")
	for _, page := range []string{"flamegraph", "top", "source?f=make_texture"} {
		resp, body := fetch(t, srv.URL+"/debug/pprof/ui/"+page)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", page, body)
		require.Contains(t, body, "make_texture", page)
		require.NotContains(t, body, "<img src=x", page)
	}
	resp, _ = fetch(t, srv.URL+"/debug/pprof/ui/nothing")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
