/* glibc_shim: preloaded for the "glibc" runs of programs that link another
 * allocator themselves (Debian's redis-server links libjemalloc), so that
 * "glibc" really means glibc's malloc. Every entry point forwards to glibc's
 * own implementation (the __libc_* aliases, or libc.so.6's symbol found
 * with dlsym on libc's handle, which skips the interposers). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

EXPORT void *malloc(size_t n) { return __libc_malloc(n); }
EXPORT void *calloc(size_t k, size_t n) { return __libc_calloc(k, n); }
EXPORT void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
EXPORT void free(void *p) { __libc_free(p); }
EXPORT void cfree(void *p) { __libc_free(p); }
EXPORT void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
EXPORT void *valloc(size_t n) { return __libc_valloc(n); }
EXPORT void *pvalloc(size_t n) { return __libc_pvalloc(n); }

EXPORT void *aligned_alloc(size_t a, size_t n)
{
	if (a == 0 || (a & (a - 1)) != 0) {
		errno = EINVAL;
		return NULL;
	}
	return __libc_memalign(a, n);
}

EXPORT int posix_memalign(void **out, size_t a, size_t n)
{
	if (a < sizeof(void *) || (a & (a - 1)) != 0)
		return EINVAL;
	void *p = __libc_memalign(a, n);
	if (p == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}

EXPORT size_t malloc_usable_size(void *p)
{
	static size_t (*libc_usable)(void *);
	if (libc_usable == NULL) {
		void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
		if (h != NULL)
			libc_usable = (size_t (*)(void *))dlsym(h, "malloc_usable_size");
		if (libc_usable == NULL)
			return 0;
	}
	return libc_usable(p);
}
