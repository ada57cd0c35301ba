// Fuzz target for tagalloc diff's input: two report files, each read as
// tagalloc report reads one, then compared and rendered.

package reporter

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDiff: whatever two files Read accepts, Compare and both renderings
// work (no panic, no overflow of the signed deltas into nonsense JSON).
// The bytes are split at the first NUL (no report holds one): A, then B.
func FuzzDiff(f *testing.F) {
	a, b := twoReports()
	var ja, jb bytes.Buffer
	_ = a.WriteJSON(&ja)
	_ = b.WriteJSON(&jb)
	f.Add(append(append(ja.Bytes(), 0), jb.Bytes()...))
	f.Add(append(append(jb.Bytes(), 0), ja.Bytes()...))
	f.Add([]byte(`{"schema":"tagalloc.report/v1","processes":[{"pid":1,"command":["a"],"tags":[{"name":"t","live_bytes":18446744073709551615,"alloc_bytes":18446744073709551615}]}]}` + "\x00" +
		`{"schema":"tagalloc.report/v1","processes":[{"pid":1,"command":["a"],"tags":[{"name":"t","live_bytes":0,"alloc_bytes":0}]},{"pid":1,"command":["a"]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ab, bb, _ := bytes.Cut(data, []byte{0})
		ra, err := Read(bytes.NewReader(ab))
		if err != nil {
			return
		}
		rb, err := Read(bytes.NewReader(bb))
		if err != nil {
			return
		}
		d := Compare(ra, rb)
		var out bytes.Buffer
		if err := d.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if err := d.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out.Bytes()) {
			t.Fatalf("diff JSON does not parse: %s", out.Bytes())
		}
	})
}
