package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write writes path through write, via a temporary file in path's
// directory (created 0600 by os.CreateTemp) renamed over path; on an error
// path is left as it was and the temporary file removed.
func Write(path string, write func(io.Writer) error) error {
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
