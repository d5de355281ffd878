/* Preloaded by scripts/check_sanitizers.sh into the processes ctest starts, so that LeakSanitizer
 * can name the library behind each of Open MPI's leaks (scripts/sanitizers/lsan-openmpi.supp).
 * Built with frame pointers and without sanitizers. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Open MPI 4.1 unloads its MCA components (and libpmix, which one of them loads) in
 * MPI_Finalize, before LeakSanitizer looks at the heap at exit: what their globals still pointed
 * to then looks leaked, allocated from an "<unknown module>". With dlclose a no-op every library
 * stays mapped until exit, that memory is reachable again and the rest names its library. */
int dlclose(void *handle) {
  (void)handle;
  return 0;
}

/* glibc's asprintf allocates in code built without frame pointers, so the fast unwinder that
 * records each allocation stops there and never reaches the caller (Open MPI). Allocated here,
 * the caller is the next frame. */
static int format_alloc(char **out, const char *fmt, va_list ap) {
  va_list count;
  va_copy(count, ap);
  int n = vsnprintf(NULL, 0, fmt, count);
  va_end(count);
  if (n < 0) return -1;
  char *s = malloc((size_t)n + 1);
  if (!s) return -1;
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  *out = s;
  return n;
}

int vasprintf(char **out, const char *fmt, va_list ap) { return format_alloc(out, fmt, ap); }

int __vasprintf_chk(char **out, int flag, const char *fmt, va_list ap) {
  (void)flag;
  return format_alloc(out, fmt, ap);
}

int asprintf(char **out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = format_alloc(out, fmt, ap);
  va_end(ap);
  return n;
}

int __asprintf_chk(char **out, int flag, const char *fmt, ...) {
  (void)flag;
  va_list ap;
  va_start(ap, fmt);
  int n = format_alloc(out, fmt, ap);
  va_end(ap);
  return n;
}
