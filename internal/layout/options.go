package layout

// The types of the generated Options table (layout.go): written here, not
// by mklayout, so the generator holds only the table's data.

// Build is the builds of the native library that read an option.
type Build int

// The builds (cgo/src/shared.h: TA_OPT_ANY, TA_OPT_CHECK, TA_OPT_STACKS).
const (
	BuildAll    Build = iota // every build
	BuildCheck               // the checking build (TA_CHECK; tagalloc run --check)
	BuildStacks              // the stacks build (TA_SAMPLING; tagalloc run --stacks)
)

// String is the build's name in docs/c-api.md's table.
func (b Build) String() string { return [...]string{"all", "checking", "stacks"}[b] }

// Option is one of the native library's environment variables. A size
// option (Field set) is in cgo/src/options.c's table (TA_OPTIONS), parsed
// once with the size syntax (internal/size), Value by default; the others
// are strings the library reads where it uses them.
type Option struct {
	Name    string // the environment variable
	Field   string // the _ta_options_t field a size option sets ("": a string option)
	Default string // as the docs give it: a size ("64G", "200"), "(unset)", or a string option's value
	Value   uint64 // a size option's Default, in bytes (or units)
	Builds  Build
	Doc     string
}
