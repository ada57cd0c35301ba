package layout

// MustOption is the native library's option called name, for the Go code
// that shares it (package arena's purge policy, package alloc's
// environment): one default for both sides. A name the table lacks is a
// programming error.
func MustOption(name string) Option {
	for _, o := range Options {
		if o.Name == name {
			return o
		}
	}
	panic("layout: the native library has no option " + name)
}
