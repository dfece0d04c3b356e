/* Injected I/O errors for real `workrail` processes (`io_errors.rs`), loaded with LD_PRELOAD.
 *
 * While the switch file (WORKRAIL_EIO_SWITCH) exists, each read, write and sync of a file under
 * WORKRAIL_EIO_ROOT fails with EIO with a probability of WORKRAIL_EIO_PER_MILLE / 1000. Other
 * files, pipes and sockets (the MCP stdio) are never touched. The switch is looked at every
 * 2 ms at most. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static const char *root;
static size_t root_len;
static const char *switch_path;
static unsigned per_mille;
static volatile int switched_on;
static volatile long long switch_checked_ns = -1000000000LL;
static __thread unsigned seed;

__attribute__((constructor)) static void eio_init(void) {
    root = getenv("WORKRAIL_EIO_ROOT");
    root_len = root ? strlen(root) : 0;
    switch_path = getenv("WORKRAIL_EIO_SWITCH");
    const char *p = getenv("WORKRAIL_EIO_PER_MILLE");
    per_mille = p ? (unsigned)atoi(p) : 0;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int on(void) {
    long long now = now_ns();
    if (now - switch_checked_ns > 2000000LL) {
        struct stat st;
        switched_on = stat(switch_path, &st) == 0;
        switch_checked_ns = now;
    }
    return switched_on;
}

static int under_root(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strncmp(path, root, root_len) == 0 && (path[root_len] == '/' || path[root_len] == 0);
}

static int fail(int fd) {
    if (!root || !switch_path || per_mille == 0 || !on()) return 0;
    if (seed == 0) seed = (unsigned)getpid() * 2654435761u ^ (unsigned)(size_t)&seed;
    if ((unsigned)(rand_r(&seed) % 1000) >= per_mille) return 0;
    if (!under_root(fd)) return 0;
    errno = EIO;
    return 1;
}

#define REAL(name) \
    static __typeof__(name) *real; \
    if (!real) real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write);
    return fail(fd) ? -1 : real(fd, buf, count);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64);
    return fail(fd) ? -1 : real(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    REAL(writev);
    return fail(fd) ? -1 : real(fd, iov, iovcnt);
}

ssize_t read(int fd, void *buf, size_t count) {
    REAL(read);
    return fail(fd) ? -1 : real(fd, buf, count);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    REAL(pread64);
    return fail(fd) ? -1 : real(fd, buf, count, offset);
}

int fsync(int fd) {
    REAL(fsync);
    return fail(fd) ? -1 : real(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    return fail(fd) ? -1 : real(fd);
}
