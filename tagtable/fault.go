// Reading a mapping that its process may truncate.

package tagtable

// recoverFault turns a fault on a mapping into an error: the process
// truncated the file it shares with us, and the pages past its new end
// raise SIGBUS. Use with the fault panics on, in the function that reads
// the mapping:
//
//	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
//	defer recoverFault(&err)
func recoverFault(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if f, ok := r.(interface{ Addr() uintptr }); ok {
		*err = fail("the file shrank while it was read (fault at %#x): the process truncated it", f.Addr())
		return
	}
	panic(r)
}
