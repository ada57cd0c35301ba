//go:build cgo

package tagcgo

/*
#cgo CFLAGS: -I${SRCDIR}/../include -I${SRCDIR}/../src -O2
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include "tagalloc.h"
#include "shared.h" // the library's limits (generated from internal/layout)

// The library's functions, found once by tc_resolve; NULL when absent.
static int (*tc_push_fn)(const char *);
static void (*tc_pop_fn)(void);
static void (*tc_set_fn)(const char *);
static void (*tc_clear_fn)(void);
static int (*tc_stats_fn)(const char *, tagalloc_tag_stats_t *);

// The names of the thread's active Do calls, one NUL-terminated copy per
// nesting level: the library may keep the pointer it was given while the
// tag is current, and Go memory may not be kept by C, so the name is copied
// here (no malloc: a malloc would itself be charged to a tag).
#define TC_NAME_MAX TA_TAG_NAME_MAX
#define TC_DEPTH TA_TAG_STACK
static __thread char tc_names[TC_DEPTH][TC_NAME_MAX + 1];
static __thread int tc_depth;

// 1 if the library is there (push/pop or set/clear), else 0.
static int tc_resolve(void) {
	tc_push_fn = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tagalloc_push_tag");
	tc_pop_fn = (void (*)(void))dlsym(RTLD_DEFAULT, "tagalloc_pop_tag");
	if (!tc_push_fn || !tc_pop_fn) tc_push_fn = NULL, tc_pop_fn = NULL;
	tc_set_fn = (void (*)(const char *))dlsym(RTLD_DEFAULT, "SetHeapBlockTagForThread");
	tc_clear_fn = (void (*)(void))dlsym(RTLD_DEFAULT, "ClearHeapBlockTagForThread");
	if (!tc_set_fn || !tc_clear_fn) tc_set_fn = NULL, tc_clear_fn = NULL;
	tc_stats_fn = (int (*)(const char *, tagalloc_tag_stats_t *))dlsym(RTLD_DEFAULT, "tagalloc_tag_stats");
	return tc_push_fn != NULL || tc_set_fn != NULL;
}

// Make tag (valid: checked in Go) the thread's tag. 0, or an errno and
// nothing to undo.
static int tc_enter(_GoString_ tag) {
	if (tc_depth >= TC_DEPTH) return EOVERFLOW;
	size_t n = _GoStringLen(tag);
	char *name = tc_names[tc_depth];
	memcpy(name, _GoStringPtr(tag), n);
	name[n] = 0;
	if (tc_push_fn) {
		int rc = tc_push_fn(name);
		if (rc) return rc;
	} else {
		tc_set_fn(name); // no push: the enclosing name is in tc_names for tc_leave
	}
	tc_depth++;
	return 0;
}

// Undo the last successful tc_enter on this thread.
static void tc_leave(void) {
	tc_depth--;
	if (tc_pop_fn) tc_pop_fn();
	else if (tc_depth > 0) tc_set_fn(tc_names[tc_depth - 1]);
	else tc_clear_fn();
}

static int tc_stats(_GoString_ tag, tagalloc_tag_stats_t *out) {
	char name[TC_NAME_MAX + 1];
	size_t n = _GoStringLen(tag);
	if (!tc_stats_fn || n > TC_NAME_MAX) return EINVAL;
	memcpy(name, _GoStringPtr(tag), n);
	name[n] = 0;
	return tc_stats_fn(name, out);
}
*/
import "C"

var loaded = C.tc_resolve() != 0

func enter(tag string) int { return int(C.tc_enter(tag)) }

func leave() { C.tc_leave() }

func stats(tag string) (TagStats, bool) {
	var s C.tagalloc_tag_stats_t
	if C.tc_stats(tag, &s) != 0 {
		return TagStats{}, false
	}
	return TagStats{
		LiveBytes:     uint64(s.live_bytes),
		LiveBlocks:    uint64(s.live_blocks),
		AllocBytes:    uint64(s.alloc_bytes),
		AllocBlocks:   uint64(s.alloc_blocks),
		PeakLiveBytes: uint64(s.peak_live_bytes),
	}, true
}
