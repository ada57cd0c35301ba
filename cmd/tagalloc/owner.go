// Whose process is it: snapshot, top and serve read only the caller's own
// processes, and say so before reading anything of another user's.

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/tagalloc/tagalloc/procbooks"
	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

// processUIDs returns the real, effective and saved user ids of pid, from
// /proc/PID/status (readable by anyone, and it reveals no books).
func processUIDs(pid int) ([3]int, error) {
	var ids [3]int
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		if os.IsNotExist(err) {
			return ids, fmt.Errorf("process %d does not exist", pid)
		}
		return ids, fmt.Errorf("process %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) < 3 {
			break
		}
		for i := range ids {
			if ids[i], err = strconv.Atoi(fs[i]); err != nil {
				return ids, fmt.Errorf("process %d: its status has a bad Uid line %q", pid, sc.Text())
			}
		}
		return ids, nil
	}
	return ids, fmt.Errorf("process %d: its status has no Uid line", pid)
}

// userName is "name (uid N)", or "uid N" for an id with no name.
func userName(uid int) string { return reporter.UserLabel(userLogin(uid), uid) }

// userLogin is the name of user uid ("" if it has none).
func userLogin(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return ""
}

// checkOwner refuses a process that is not wholly ours: its real,
// effective and saved user ids must all be our effective one (the kernel's
// own rule for reading another process's memory). Root is refused too, so
// one rule holds for everyone (root can always run tagalloc as the owner).
// The message names the owner and what to do.
func checkOwner(pid int, cmd string) error {
	ids, err := processUIDs(pid)
	if err != nil {
		return err
	}
	me := os.Geteuid()
	for _, id := range ids {
		if id == me {
			continue
		}
		owner := ids[1] // the effective user, unless it is us
		if owner == me {
			owner = id
		}
		as := fmt.Sprintf("'#%d'", owner) // sudo's spelling of a bare uid
		if u, err := user.LookupId(strconv.Itoa(owner)); err == nil && u.Username != "" {
			as = u.Username
		}
		return fmt.Errorf("process %d belongs to %s, not to you (%s): tagalloc reads only your own processes' books; run it as that user (sudo -u %s tagalloc %s %d)",
			pid, userName(owner), userName(me), as, cmd, pid)
	}
	return nil
}

// readOwnProcess reads the books of pid after checking it is ours.
func readOwnProcess(pid int, cmd string) (*tagtable.Snapshot, error) {
	if err := checkOwner(pid, cmd); err != nil {
		return nil, err
	}
	return procbooks.Read(pid)
}
