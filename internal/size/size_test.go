package size

import "testing"

func TestParse(t *testing.T) {
	cs, err := Cases()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		got, err := Parse(c.In, 1<<46)
		if c.Bad {
			if err == nil {
				t.Errorf("Parse(%q) = %d, want an error", c.In, got)
			}
			continue
		}
		if err != nil || got != c.Want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.In, got, err, c.Want)
		}
	}
	for _, c := range []struct {
		in  string
		max uint64
		ok  bool
	}{
		{"64T", 1 << 46, false}, {"65536G", 1 << 46, true}, {"65537G", 1 << 46, false},
		{"70368744177664", 1 << 46, true}, {"70368744177665", 1 << 46, false},
		{"18446744073709551615", ^uint64(0), true}, {"18446744073709551616", ^uint64(0), false},
		{"17179869184G", ^uint64(0), false}, {" 12K ", 1 << 46, true},
	} {
		if _, err := Parse(c.in, c.max); (err == nil) != c.ok {
			t.Errorf("Parse(%q, %d): error %v, want ok %v", c.in, c.max, err, c.ok)
		}
	}
}
