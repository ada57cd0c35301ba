/* error.c: messages without allocating. A tiny formatter (%s %d %u %zu %zx
 * %p %%) into a stack buffer, written with write(2). */

#include <stdarg.h>
#include <stdlib.h>

static size_t _ta_fmt_u(char *out, unsigned long long v, unsigned base) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

static size_t _ta_vformat(char *buf, size_t cap, const char *fmt, va_list ap) {
  size_t n = 0;
#define PUT(c) do { if (n + 1 < cap) buf[n++] = (c); } while (0)
  for (const char *f = fmt; *f; f++) {
    if (*f != '%') { PUT(*f); continue; }
    f++;
    bool z = false;
    if (*f == 'z') { z = true; f++; }
    char num[24];
    size_t k = 0;
    switch (*f) {
    case 's': {
      const char *s = va_arg(ap, const char *);
      if (!s) s = "(null)";
      while (*s) PUT(*s++);
      continue;
    }
    case 'd': {
      long long v = z ? (long long)va_arg(ap, ssize_t) : va_arg(ap, int);
      if (v < 0) { PUT('-'); v = -v; }
      k = _ta_fmt_u(num, (unsigned long long)v, 10);
      break;
    }
    case 'u': k = _ta_fmt_u(num, z ? va_arg(ap, size_t) : va_arg(ap, unsigned), 10); break;
    case 'x': k = _ta_fmt_u(num, z ? va_arg(ap, size_t) : va_arg(ap, unsigned), 16); break;
    case 'p': PUT('0'); PUT('x'); k = _ta_fmt_u(num, (uintptr_t)va_arg(ap, void *), 16); break;
    case '%': PUT('%'); continue;
    default: PUT('%'); if (*f) PUT(*f); else f--; continue;
    }
    for (size_t i = 0; i < k; i++) PUT(num[i]);
  }
#undef PUT
  buf[n] = 0;
  return n;
}

static void _ta_vmessage(const char *fmt, va_list ap) {
  char buf[512];
  memcpy(buf, "tagalloc: ", 10);
  size_t n = 10 + _ta_vformat(buf + 10, sizeof(buf) - 11, fmt, ap);
  buf[n++] = '\n';
  _ta_write_stderr(buf, n);
}

TA_COLD static void _ta_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  _ta_vmessage(fmt, ap);
  va_end(ap);
  abort();
}

TA_COLD static void _ta_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  _ta_vmessage(fmt, ap);
  va_end(ap);
}
