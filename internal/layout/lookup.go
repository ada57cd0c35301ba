package layout

// OptionNamed is the native library's option called name, for the Go
// code that shares it (package arena's purge policy, package alloc's
// environment): one default for both sides.
func OptionNamed(name string) (Option, bool) {
	for _, o := range Options {
		if o.Name == name {
			return o, true
		}
	}
	return Option{}, false
}

// MustOption is OptionNamed for a name the caller knows is there.
func MustOption(name string) Option {
	o, ok := OptionNamed(name)
	if !ok {
		panic("layout: the native library has no option " + name)
	}
	return o
}
