// The watch on Linux: inotify.

package dirwatch

import (
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Creates watches dir for files whose names end in suffix created
// in it or moved into it, until stop is closed; nil if dir cannot be
// watched. Other names do not wake the caller: a process makes its
// books file and its events file under temporary names, four names in
// all, of which one matters (under a program starting 200 processes a
// second, each woke the launcher). The drainer comes
// soon to a new process's events file (the library makes it under a
// temporary name and renames it into place), and reads the directory
// again only when the kernel's queue of names overflowed.
func Creates(dir, suffix string, stop <-chan struct{}) *Watch {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: reads park in the poller
	w := newWatch()
	go func() {
		<-stop
		f.Close() // ends the reader's Read
	}()
	go func() {
		buf := make([]byte, 64*1024)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			var names []string
			lost := false
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				end := off + unix.SizeofInotifyEvent + int(ev.Len)
				if end > n {
					lost = true // not what the kernel writes: read the directory
					break
				}
				if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
					lost = true
				} else if name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:end]), "\x00"); strings.HasSuffix(name, suffix) {
					names = append(names, name)
				}
				off = end
			}
			if len(names) > 0 || lost {
				w.add(names, lost)
			}
		}
	}()
	return w
}
