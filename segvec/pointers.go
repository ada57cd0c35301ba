// The element-type check: memory the GC never scans must not hold Go
// pointers, or what they point to could be freed under them.

package segvec

import (
	"fmt"
	"reflect"
)

// checkNoPointers returns an ErrHasPointers naming the first field of t
// (depth first, in declaration order) that holds a Go pointer: a
// pointer, unsafe.Pointer, string, slice, map, interface, channel or
// func, directly or inside an array or struct. Zero-length arrays hold
// nothing and pass; uintptr passes (the GC does not follow it).
func checkNoPointers(t reflect.Type) error {
	path, kind := findPointer(t, t.String())
	if path == "" {
		return nil
	}
	return fmt.Errorf("%w: %s is a %s; memory in segvec is not scanned by the GC, so store fixed-size arrays, numbers, or indices into another Vec instead", ErrHasPointers, path, kind)
}

func findPointer(t reflect.Type, path string) (string, string) {
	switch t.Kind() {
	case reflect.Pointer, reflect.UnsafePointer:
		return path, "pointer (" + t.String() + ")"
	case reflect.String:
		return path, "string (" + t.String() + ")"
	case reflect.Slice:
		return path, "slice (" + t.String() + ")"
	case reflect.Map:
		return path, "map (" + t.String() + ")"
	case reflect.Interface:
		return path, "interface (" + t.String() + ")"
	case reflect.Chan:
		return path, "channel (" + t.String() + ")"
	case reflect.Func:
		return path, "func (" + t.String() + ")"
	case reflect.Array:
		if t.Len() == 0 {
			return "", ""
		}
		return findPointer(t.Elem(), path+"[0]")
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if p, k := findPointer(f.Type, path+"."+f.Name); p != "" {
				return p, k
			}
		}
	}
	return "", ""
}
