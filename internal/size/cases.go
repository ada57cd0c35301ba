package size

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Case is one line of testdata/sizes.txt: an input and the byte count it
// means, or Bad.
type Case struct {
	In   string
	Want uint64
	Bad  bool
}

// Cases reads testdata/sizes.txt, the cases this package's parser and the
// library's (cgo/src/options.c) are both tested against.
func Cases() ([]Case, error) {
	_, here, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(here), "testdata", "sizes.txt"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCases(f)
}

// readCases reads lines "INPUT MEANING": the last word is the byte count
// or "bad", the rest the input ("=" for the empty string).
func readCases(r io.Reader) ([]Case, error) {
	var cs []Case
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("sizes.txt: %q: want INPUT MEANING", line)
		}
		c := Case{In: line[:i], Bad: line[i+1:] == "bad"}
		if c.In == "=" {
			c.In = ""
		}
		if !c.Bad {
			var err error
			if c.Want, err = strconv.ParseUint(line[i+1:], 10, 64); err != nil {
				return nil, fmt.Errorf("sizes.txt: %q: %v", line, err)
			}
		}
		cs = append(cs, c)
	}
	return cs, sc.Err()
}
