package size

import (
	"fmt"
	"strings"
)

// Parse reads s (surrounding spaces allowed) as a byte count of at most
// max bytes.
func Parse(s string, max uint64) (uint64, error) {
	t := strings.TrimSpace(s)
	var v uint64
	i := 0
	for ; i < len(t) && t[i] >= '0' && t[i] <= '9'; i++ {
		d := uint64(t[i] - '0')
		if v > (max-d)/10 {
			return 0, fmt.Errorf("size %q: more than %d bytes", s, max)
		}
		v = v*10 + d
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want digits, then optionally K, M or G, such as 65536, 512K, 64MiB or 1G", s)
	}
	shift := 0
	if i < len(t) {
		switch t[i] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		}
	}
	if shift > 0 {
		i++
		if i < len(t) && (t[i] == 'i' || t[i] == 'I') {
			i++
		}
	}
	if i < len(t) && (t[i] == 'b' || t[i] == 'B') {
		i++
	}
	if i != len(t) {
		return 0, fmt.Errorf("size %q: want digits, then optionally K, M or G, such as 65536, 512K, 64MiB or 1G", s)
	}
	if v > max>>shift {
		return 0, fmt.Errorf("size %q: more than %d bytes", s, max)
	}
	return v << shift, nil
}
