package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// Write writes path through write, via a temporary file in path's
// directory (created 0600 by os.CreateTemp) renamed over path; on an error
// path is left as it was and the temporary file removed.
//
// Only a regular file is replaced. A path that names something else (a
// device such as -o /dev/null or /dev/stdout, a named pipe) is written in
// place: a rename would replace the node itself, and run as root that turns
// /dev/null into a plain file every other program then reads back. A
// symbolic link is followed, and the file it names is the one replaced.
func Write(path string, write func(io.Writer) error) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return writeInPlace(path, write)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeInPlace writes to a path that is not a regular file (a directory
// fails here, with the open's error).
func writeInPlace(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
