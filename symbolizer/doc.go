// Package symbolizer names the frames of sampled stacks (docs/ARCHITECTURE.md, D7):
// given the module table a process had (for each loaded object: path,
// build-id, mapping, load bias) and an address in one of its modules, it
// returns the function, source file and line there, inlined calls
// included, from the object's ELF symbols and DWARF, read from disk in Go,
// also long after the process has exited; and it rolls stacks up to the
// shared library they are charged to ("libGLESv2_adreno.so holds 78 MiB
// live").
//
// # Glossary
//
//   - Module: one executable mapping of a loaded object: Path, BuildID,
//     Start/End/Offset (as in /proc/PID/maps) and Bias. ReadModules reads
//     them from /proc/PID/maps; the native side records the same fields
//     (tagtable.Module converts to Module). ModuleOf finds an address's
//     module by binary search.
//   - Load bias: address - ELF virtual address. 0 for a non-PIE
//     executable; the load base of a PIE or shared library. The lookups and
//     the "module+0xVADDR" fallback use the ELF virtual address
//     (addr - Bias), the one addr2line -e FILE takes.
//   - Build-id: the hex NT_GNU_BUILD_ID note. It names one build of a
//     file: the cache key, the key of separate debug files, and the check
//     that the file on disk is the one the process ran.
//   - Return address: what unwinding gives for every frame. Frames looks
//     up addr-1 (inside the call instruction, so the line is the call's);
//     FramesPC takes an exact instruction address.
//
// # Resolving an address
//
//  1. The module's file is loaded once per Symbolizer (cached by build-id;
//     by path, mtime and size for a file without one; least recently used
//     dropped beyond WithCacheSize): its .symtab and .dynsym FUNC symbols
//     are sorted once (aliases merged, the best name kept; a symbol of
//     size 0 runs to the next symbol, never past its section's end), and
//     the address ranges of its DWARF compile units are indexed. A
//     separate debug file is used when found: DEBUGDIR/.build-id/ab/cdef.debug
//     (DEBUGDIR is /usr/lib/debug unless WithDebugDirs), else the file's
//     .gnu_debuglink (beside the file, in .debug/ beside it, or under
//     DEBUGDIR), with its CRC checked.
//  2. If the module records a build-id and the file at its path has
//     another (rebuilt, upgraded) or is gone, the file is not used: a
//     debug file of the recorded build-id stands in if there is one, else
//     the frame is "module+0xVADDR" with Stale set and an error wrapping
//     ErrBuildIDMismatch.
//  3. DWARF first: the compile unit holding the address gets, on first
//     use, a sorted line table and an index of its functions
//     (DW_TAG_subprogram), and the function holding the address, on
//     first use, its tree of inlined calls (DW_TAG_inlined_subroutine)
//     (the whole unit's tree only for an address in none of the index's
//     functions: a GNU C nested function's).
//     The address gives one frame per inlined call, innermost first (its
//     line from the line table; each caller's line is the call's
//     DW_AT_call_file/DW_AT_call_line), then the function itself. Names
//     are the demangled linkage name, else DW_AT_name, following
//     DW_AT_abstract_origin and DW_AT_specification. File names are
//     absolute: a relative one (a source compiled as "../x.c", whose
//     DWARF 5 line table keeps the directory ".." as written) is joined
//     with the unit's DW_AT_comp_dir.
//  4. Else the symbol table: the symbol whose range holds the address
//     (.symtab, else .dynsym in a stripped file), with the line table's
//     file and line when a unit covers the address.
//  5. Else "module+0xVADDR", Origin OriginNone.
//
// C++ (Itanium) and Rust names are demangled with
// github.com/ianlancetaylor/demangle, by default without parameters or
// template arguments, as pprof shows them (WithDemangle).
//
// # The disk cache
//
// With WithDiskCache(DIR), the frames found at each address of a module
// with a build-id are kept, by build-id and ELF virtual address, in
// DIR/ab/cdef....frames, read the first time the build-id is met and
// written by Flush (merged with what the file holds by then, through a
// temporary file renamed over it; at most 1<<20 addresses a file). An
// address found there is answered without the object: a run whose
// addresses were all named before never opens the file nor decompresses
// its DWARF (libpython: about 0.5 s of CPU a run), and the frames of a
// build come back, without an error, after its file is gone or replaced.
// Otherwise the answers are the same as without the cache: only frames
// found in the build-id's own file with DWARF are kept (not errors, not
// fallbacks of a missing or mismatched file, not a debug file standing in
// for another build, not files without DWARF, which load fast and may be
// named better once an unstripped copy or a .gnu_debuglink file appears).
//
// Beside it, the directory DIR/ab/cdef....units holds the build's unit
// index: the compile units' address ranges and, for each unit a lookup
// has needed, a block from which the frames at any of its addresses are
// made as the object makes them (its line table; its addresses cut where
// a scope's, a symbol's or another unit's range starts or ends, each piece
// with its chain of inlined calls and its symbol). An address the frames
// file does not hold, in a unit the index holds, is named without the
// object: sampling meets a few addresses no run met before in most runs,
// and each made the run read the whole object again (libpython's DWARF:
// 30 ms; libc's compressed debug file: 0.2 s). A miss that does load the
// object adds the block of its unit, and Flush spends about as long again
// as the load took on more blocks (the units of the cached addresses
// first), so that the misses stop coming. Each block is a file of its own,
// written once (libpython's biggest, unicodeobject.c's, 0.5 MB); a lookup
// decodes the chunk of the line table it needs.
//
// A file is used only if it is whole (checksum) and has this package's
// format version (diskCacheVersion, bumped whenever the frames given for
// an address change), its build-id, and the fingerprint of the
// configuration: the demangling mode and, for each debug directory,
// whether it holds the build-id's debug file (its size and mtime), so
// frames cached without a debug file are not used once one is installed.
// Anything else about a file (missing, truncated, garbage, absurd counts)
// makes it ignored, and the next Flush replaces it; its counts are bounded
// by its size. The same holds for the unit index's files
// (TestUnitIndexSystemLibraries compares its frames with the object's at
// every address of libc and libpython with TAGALLOC_TEST_EVERY=1). The tagalloc command keeps its cache in
// DefaultDiskCacheDir (~/.cache/tagalloc/symbols) unless
// $TAGALLOC_SYMBOL_CACHE names another directory or is "off"
// (DiskCacheFromEnv).
//
// # Library roll-up
//
// Library(stack) names the library a stack (module paths, innermost
// first) is charged to: the first module that is not in the skip set (the
// C and C++ runtimes, the loader, libtagalloc.so: DefaultSkip; NewRollup
// sets another). The main executable is a library like any other.
//
// # Errors and untrusted input
//
// Object files are read from disk after the fact and may be truncated,
// corrupt or hostile. Frames always returns at least one frame, and an
// error beside it when the module's file could not be used (missing, not
// ELF, malformed: ErrMalformed; another build: ErrBuildIDMismatch). Loading
// and lookups never panic: a panic of debug/elf or debug/dwarf becomes an
// ErrMalformed error, walks are bounded, and FuzzELF feeds random bytes
// to the loader. A Symbolizer is safe for concurrent use.
//
// # Cost
//
// A lookup in a loaded object costs about 0.5 µs (binary searches and a
// cached name); the first address of a compile unit pays for its line
// table and function index, the first of a function for its tree of
// inlined calls, the first of an object for reading it
// (BenchmarkFrames: 10k addresses of a 1000-function program in 5 ms
// warm, 20 ms from nothing; libc through its 4 MB debug file, every unit
// touched, 5 ms warm, 0.4 s from nothing, 0.15 s of it decompressing the
// DWARF). What is loaded stays in memory until the object leaves the
// cache: the symbols, and the DWARF sections of files with DWARF, which
// lie in a read-only mapping of the file (a regular file, uncompressed
// sections) rather than on the heap; a file truncated meanwhile makes the
// lookups that read it give the symbol table's frame or the fallback.
package symbolizer
