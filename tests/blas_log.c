/* What compiled programs ask of BLAS, for tests (tests/util.py, blas_calls): preloaded
 * (LD_PRELOAD) in a child process, this library defines the CBLAS routines hlo2dace calls,
 * appends one line per call to the file $H2D_BLAS_LOG (the routine, its sizes, alpha and
 * the addresses of its operands) and calls the real routine (OpenBLAS's). A column-major
 * call (DaCe's BLAS expansions make them) is logged as the row-major call it equals.
 * Lines are written with one write(2) each on an O_APPEND descriptor: whole lines, in order,
 * from any thread. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { COL_MAJOR = 102, NO_TRANS = 111, TRANS = 112 };

/* A column-major gemm is the row-major one of the transposed product: C^T = B^T A^T. */
#define ROW_MAJOR_GEMM                                                                     \
  int rta = order == COL_MAJOR ? tb : ta, rtb = order == COL_MAJOR ? ta : tb;              \
  int rm = order == COL_MAJOR ? n : m, rn = order == COL_MAJOR ? m : n;                     \
  const void *ra = order == COL_MAJOR ? (const void *)b : (const void *)a;                 \
  const void *rb = order == COL_MAJOR ? (const void *)a : (const void *)b;

/* A column-major m x n matrix is the row-major n x m one, transposed. */
#define ROW_MAJOR_GEMV                                                                     \
  int rtrans = order != COL_MAJOR ? trans : trans == NO_TRANS ? TRANS : NO_TRANS;          \
  int rm = order == COL_MAJOR ? n : m, rn = order == COL_MAJOR ? m : n;

static void record(const char *format, ...) {
  static int fd = -2;
  if (fd == -2) {
    const char *path = getenv("H2D_BLAS_LOG");
    fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT, 0644) : -1;
  }
  if (fd < 0) return;
  char line[512];
  va_list args;
  va_start(args, format);
  int length = vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (length > 0) write(fd, line, length < (int)sizeof line ? length : (int)sizeof line - 1);
}

/* The real routine: the next definition in the global scope, else OpenBLAS's (which the
 * programs link, loaded into their own local scope). */
static void *next(const char *name) {
  void *found = dlsym(RTLD_NEXT, name);
  if (!found) {
    void *library = dlopen("libopenblas.so.0", RTLD_NOW);
    found = library ? dlsym(library, name) : NULL;
  }
  if (!found) {
    fprintf(stderr, "blas_log: no %s after this library, nor in libopenblas.so.0\n", name);
    abort();
  }
  return found;
}

#define REAL_GEMM(P, T)                                                                    \
  void cblas_##P##gemm(int order, int ta, int tb, int m, int n, int k, T alpha, const T *a,  \
                       int lda, const T *b, int ldb, T beta, T *c, int ldc) {              \
    static void (*real)(int, int, int, int, int, int, T, const T *, int, const T *, int,   \
                        T, T *, int);                                                      \
    if (!real) real = next("cblas_" #P "gemm");                                            \
    ROW_MAJOR_GEMM                                                                         \
    record(#P "gemm %d %d %d %d %d %.17g 0 %p %p %p\n", rta, rtb, rm, rn, k, (double)alpha, \
           ra, rb, (void *)c);                                                             \
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);                     \
  }
REAL_GEMM(s, float)
REAL_GEMM(d, double)

#define COMPLEX_GEMM(P, T)                                                                 \
  void cblas_##P##gemm(int order, int ta, int tb, int m, int n, int k, const void *alpha,  \
                       const void *a, int lda, const void *b, int ldb, const void *beta,   \
                       void *c, int ldc) {                                                 \
    static void (*real)(int, int, int, int, int, int, const void *, const void *, int,     \
                        const void *, int, const void *, void *, int);                     \
    if (!real) real = next("cblas_" #P "gemm");                                            \
    const T *factor = alpha;                                                               \
    ROW_MAJOR_GEMM                                                                         \
    record(#P "gemm %d %d %d %d %d %.17g %.17g %p %p %p\n", rta, rtb, rm, rn, k,            \
           (double)factor[0], (double)factor[1], ra, rb, c);                               \
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);                     \
  }
COMPLEX_GEMM(c, float)
COMPLEX_GEMM(z, double)

#define REAL_GEMV(P, T)                                                                    \
  void cblas_##P##gemv(int order, int trans, int m, int n, T alpha, const T *a, int lda,   \
                       const T *x, int incx, T beta, T *y, int incy) {                     \
    static void (*real)(int, int, int, int, T, const T *, int, const T *, int, T, T *,     \
                        int);                                                              \
    if (!real) real = next("cblas_" #P "gemv");                                            \
    ROW_MAJOR_GEMV                                                                         \
    record(#P "gemv %d 0 %d %d 0 %.17g 0 %p %p %p\n", rtrans, rm, rn, (double)alpha,       \
           (const void *)a, (const void *)x, (void *)y);                                   \
    real(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);                       \
  }
REAL_GEMV(s, float)
REAL_GEMV(d, double)

#define COMPLEX_GEMV(P, T)                                                                 \
  void cblas_##P##gemv(int order, int trans, int m, int n, const void *alpha,              \
                       const void *a, int lda, const void *x, int incx, const void *beta,  \
                       void *y, int incy) {                                                \
    static void (*real)(int, int, int, int, const void *, const void *, int, const void *, \
                        int, const void *, void *, int);                                   \
    if (!real) real = next("cblas_" #P "gemv");                                            \
    const T *factor = alpha;                                                               \
    ROW_MAJOR_GEMV                                                                         \
    record(#P "gemv %d 0 %d %d 0 %.17g %.17g %p %p %p\n", rtrans, rm, rn, (double)factor[0], \
           (double)factor[1], a, x, y);                                                    \
    real(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);                       \
  }
COMPLEX_GEMV(c, float)
COMPLEX_GEMV(z, double)

#define REAL_DOT(P, T)                                                                     \
  T cblas_##P##dot(int n, const T *x, int incx, const T *y, int incy) {                    \
    static T (*real)(int, const T *, int, const T *, int);                                 \
    if (!real) real = next("cblas_" #P "dot");                                             \
    record(#P "dot 0 0 %d 0 0 1 0 %p %p (nil)\n", n, (const void *)x, (const void *)y);     \
    return real(n, x, incx, y, incy);                                                      \
  }
REAL_DOT(s, float)
REAL_DOT(d, double)

#define REAL_AXPY(P, T)                                                                    \
  void cblas_##P##axpy(int n, T alpha, const T *x, int incx, T *y, int incy) {             \
    static void (*real)(int, T, const T *, int, T *, int);                                 \
    if (!real) real = next("cblas_" #P "axpy");                                            \
    record(#P "axpy 0 0 %d 0 0 %.17g 0 %p %p (nil)\n", n, (double)alpha, (const void *)x,   \
           (void *)y);                                                                     \
    real(n, alpha, x, incx, y, incy);                                                      \
  }
REAL_AXPY(s, float)
REAL_AXPY(d, double)
