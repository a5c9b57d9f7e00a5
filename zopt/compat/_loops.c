/* The per-chunk loops of a batch of chunks, one foreign call per batch (issue 34, G3).
 *
 * Python pays ~10-25 us of GIL per foreign call made between two chunks: the interpreter runs cold
 * after each chunk's megabyte of work. These loops run a batch's system calls (open/read/close of
 * every source chunk file) and compressor calls (libzstd's ZSTD_compress2, c-blosc's
 * blosc_compress_ctx) in one call that ctypes makes with the GIL released.
 *
 * No library is linked: the compressors are called through the function pointers of the libraries
 * numcodecs loaded (zopt.compat.libzstd, zopt.compat.libblosc), so the bytes are numcodecs' own.
 * Built by hatch_build.py; zopt.compat.loops falls back to Python loops where it is absent.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef size_t (*zstd_compress2_fn)(void *, void *, size_t, const void *, size_t);
typedef unsigned long long (*zstd_content_fn)(const void *, size_t);
typedef size_t (*zstd_frame_fn)(const void *, size_t);
typedef size_t (*zstd_decompress_fn)(void *, void *, size_t, const void *, size_t);
typedef int (*blosc_compress_fn)(int, int, size_t, size_t, const void *, void *, size_t, const char *, size_t, int);

/* ABI version: zopt.compat.loops refuses a library of another one. */
int64_t zopt_loops_version(void) { return 6; }

/* A refused file's sizes[k]: -(ZOPT_KIND + (st_mode & S_IFMT)) for a file that is not a regular one,
 * -(ZOPT_KIND + S_IFREG) for a regular file whose size changed while it was read (S_IFMT < ZOPT_KIND,
 * and every errno is below it). */
#define ZOPT_KIND ((int64_t)1 << 16)

/* Read the files paths[0..n) whole, file k to buf + k * stride (stride 0: each right after the
 * previous one's bytes, room bytes in all). Each file is opened with O_NONBLOCK (a FIFO or a device
 * never blocks the open) and refused unless fstat says it is a regular file; its size is known
 * before it is read. sizes[k] is the byte count stored, cap + 1 (nothing read) when the file is
 * longer than cap, or -ENOENT when it does not exist.
 * Returns -1; -2 (stride 0) when the next file does not fit in what is left of room (the caller
 * reads the files another way); or the index k of a file that failed otherwise (sizes[k] = -errno,
 * or as ZOPT_KIND above). */
int64_t zopt_read_files(const char *const *paths, int64_t n, uint8_t *buf, int64_t stride, int64_t cap, int64_t room,
                        int64_t *sizes)
{
    int64_t off = 0;
    for (int64_t k = 0; k < n; k++) {
        uint8_t *dst = stride ? buf + k * stride : buf + off;
        int fd;
        do {
            fd = open(paths[k], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        } while (fd < 0 && errno == EINTR);
        if (fd < 0) {
            if (errno == ENXIO) { /* a socket */
                sizes[k] = -(ZOPT_KIND + S_IFSOCK);
                return k;
            }
            sizes[k] = -(int64_t)errno;
            if (errno == ENOENT)
                continue;
            return k;
        }
        struct stat st;
        if (fstat(fd, &st) != 0) {
            sizes[k] = -(int64_t)errno;
            close(fd);
            return k;
        }
        if (!S_ISREG(st.st_mode)) {
            sizes[k] = -(ZOPT_KIND + (int64_t)(st.st_mode & S_IFMT));
            close(fd);
            return k;
        }
        int64_t size = (int64_t)st.st_size;
        if (size > cap) { /* longer than any chunk: nothing read, the caller refuses it by its size */
            close(fd);
            sizes[k] = cap + 1;
            continue;
        }
        if (!stride && off + size > room) {
            close(fd);
            return -2;
        }
        int64_t got = 0;
        while (got < size) {
            ssize_t r = read(fd, dst + got, (size_t)(size - got));
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                sizes[k] = -(int64_t)errno;
                close(fd);
                return k;
            }
            if (r == 0)
                break;
            got += r;
        }
        uint8_t extra; /* one byte more tells a file that grew */
        ssize_t r = 0;
        if (got == size) {
            do {
                r = read(fd, &extra, 1);
            } while (r < 0 && errno == EINTR);
            if (r < 0) {
                sizes[k] = -(int64_t)errno;
                close(fd);
                return k;
            }
        }
        close(fd);
        if (got != size || r > 0) {
            sizes[k] = -(ZOPT_KIND + S_IFREG);
            return k;
        }
        sizes[k] = got;
        off += got;
    }
    return -1;
}

/* zopt_read_files with stride 0 into blob (room bytes), then each file checked to be
 * exactly one zstd frame declaring nbytes of content and decoded with ZSTD_decompressDCtx on dctx
 * into out + k * nbytes. A file that does not exist is left out (sizes[k] = -ENOENT; its row is
 * not written). Returns -1 when every file present was decoded, -2 when one is not exactly one
 * frame of nbytes that decodes or the files do not fit in room (the caller reads them one by one,
 * naming the chunk at fault), or the index k of a file that failed to be read (as zopt_read_files). */
int64_t zopt_read_zstd(const char *const *paths, int64_t n, uint8_t *blob, int64_t cap, int64_t room, int64_t *sizes,
                       zstd_content_fn content, zstd_frame_fn frame, zstd_decompress_fn decompress, void *dctx,
                       uint8_t *out, uint64_t nbytes)
{
    int64_t failed = zopt_read_files(paths, n, blob, 0, cap, room, sizes);
    if (failed != -1)
        return failed;
    int64_t start = 0;
    for (int64_t k = 0; k < n; k++) {
        if (sizes[k] < 0)
            continue;
        if (sizes[k] > cap) /* longer than any frame of one chunk */
            return -2;
        size_t size = (size_t)sizes[k];
        const uint8_t *src = blob + start;
        if (content(src, size) != nbytes || frame(src, size) != size)
            return -2;
        if (decompress(dctx, out + k * nbytes, (size_t)nbytes, src, size) != (size_t)nbytes)
            return -2;
        start += sizes[k];
    }
    return -1;
}

/* The byte shuffle of zopt.codecs.shuffle.shuffle_rows (and numcodecs' Shuffle) on one row:
 * byte j of element i goes to j * count + i; the bytes after the last whole element stay in place. */
static void byte_shuffle(const uint8_t *src, uint8_t *dst, int64_t width, int64_t size)
{
    int64_t count = width / size;
    if (size == 4) { /* float32 and friends: the common case, kept simple for the compiler */
        for (int64_t i = 0; i < count; i++) {
            dst[i] = src[4 * i];
            dst[count + i] = src[4 * i + 1];
            dst[2 * count + i] = src[4 * i + 2];
            dst[3 * count + i] = src[4 * i + 3];
        }
    } else {
        for (int64_t i = 0; i < count; i++)
            for (int64_t j = 0; j < size; j++)
                dst[j * count + i] = src[i * size + j];
    }
    for (int64_t b = count * size; b < width; b++)
        dst[b] = src[b];
}

/* One zstd frame per row of src (n rows of width bytes) with ZSTD_compress2 on ctx, back to back
 * in dst, each after head bytes left to the caller; ends[k] is the end of chunk k (head and frame).
 * cap: the room for one frame (ZSTD_compressBound(width)). shuffle > 1: each row is byte-shuffled
 * with that element size into scratch (width bytes) first. Returns -1, or the index k of a row
 * that failed (ends[k] = zstd's error code). */
int64_t zopt_zstd_rows(zstd_compress2_fn fn, void *ctx, const uint8_t *src, int64_t n, int64_t width,
                       uint8_t *dst, int64_t cap, int64_t head, int64_t *ends, int64_t shuffle, uint8_t *scratch)
{
    int64_t off = 0;
    for (int64_t k = 0; k < n; k++) {
        const uint8_t *row = src + k * width;
        if (shuffle > 1) {
            byte_shuffle(row, scratch, width, shuffle);
            row = scratch;
        }
        size_t size = fn(ctx, dst + off + head, (size_t)cap, row, (size_t)width);
        if (size > (size_t)cap) {
            ends[k] = (int64_t)size;
            return k;
        }
        off += head + (int64_t)size;
        ends[k] = off;
    }
    return -1;
}

/* One blosc chunk per row of src with blosc_compress_ctx (numcodecs' arguments, one thread),
 * laid out as zopt_zstd_rows lays out frames. Returns -1, or the index k of a row that failed
 * (ends[k] = blosc's return value). */
int64_t zopt_blosc_rows(blosc_compress_fn fn, int clevel, int shuffle, int64_t typesize, const uint8_t *src,
                        int64_t n, int64_t width, uint8_t *dst, int64_t cap, const char *cname, int64_t blocksize,
                        int64_t head, int64_t *ends)
{
    int64_t off = 0;
    for (int64_t k = 0; k < n; k++) {
        int size = fn(clevel, shuffle, (size_t)typesize, (size_t)width, src + k * width, dst + off + head,
                      (size_t)cap, cname, (size_t)blocksize, 1);
        if (size <= 0) {
            ends[k] = size;
            return k;
        }
        off += head + size;
        ends[k] = off;
    }
    return -1;
}

/* conditional([shuffle, zstd]) or conditional([zstd]) with compress_if_smaller and a one-byte
 * header, as zopt.codecs.batch._Conditional encodes it (zopt.codecs.decisions.CompressIfSmaller, whose
 * rule for the shuffle is zopt.codecs.decisions.filter_choice, held to this loop by tests/codecs/test_conditional_rule.py;
 * ../shared/specs/optional.md):
 *   with shuffle > 0 (element size): the sample (the windows, starts[w] / lengths[w], concatenated:
 *   s bytes) is compressed shuffled and as it is; on / off = those sizes capped at s; the chunk is
 *   stored as it is (mask 0) when min(on, off) >= s, else shuffled when on < off (mask bit 0);
 *   then the chunk (shuffled or not) is compressed, and kept when smaller than width (mask bit
 *   zbit), else stored uncompressed (the shuffled or plain bytes).
 *   with shuffle == 0: no trial, the zstd frame kept when smaller than width (zbit 0).
 * Chunk k is [mask byte][frame or bytes] at dst, back to back; ends[k] its end, masks[k] its mask.
 * scratch: room for width + 2 * s bytes; trial: room for ZSTD_compressBound(s) bytes.
 * Returns -1; -2 when a frame is exactly width bytes (a tie: the caller encodes that batch another
 * way); or the index k of a chunk zstd failed on (ends[k] = zstd's code). */
int64_t zopt_zstd_conditional(zstd_compress2_fn fn, void *ctx, const uint8_t *src, int64_t n, int64_t width,
                              uint8_t *dst, int64_t cap, int64_t shuffle, int64_t zbit, const int64_t *starts,
                              const int64_t *lengths, int64_t windows, uint8_t *scratch, uint8_t *trial,
                              int64_t trial_cap, int64_t *ends, int64_t *masks)
{
    int64_t s = 0;
    for (int64_t w = 0; w < windows; w++)
        s += lengths[w];
    uint8_t *sample = scratch + width, *shuffled_sample = scratch + width + s;
    int64_t off = 0;
    for (int64_t k = 0; k < n; k++) {
        const uint8_t *row = src + k * width;
        int64_t mask = 0;
        int stored = 0, shuffled = 0;
        if (shuffle > 0) {
            int64_t at = 0;
            for (int64_t w = 0; w < windows; w++) {
                memcpy(sample + at, row + starts[w], (size_t)lengths[w]);
                at += lengths[w];
            }
            byte_shuffle(sample, shuffled_sample, s, shuffle);
            size_t on = fn(ctx, trial, (size_t)trial_cap, shuffled_sample, (size_t)s);
            if (on > (size_t)trial_cap) {
                ends[k] = (int64_t)on;
                return k;
            }
            size_t plain = fn(ctx, trial, (size_t)trial_cap, sample, (size_t)s);
            if (plain > (size_t)trial_cap) {
                ends[k] = (int64_t)plain;
                return k;
            }
            int64_t on_ = (int64_t)on < s ? (int64_t)on : s, off_ = (int64_t)plain < s ? (int64_t)plain : s;
            stored = (on_ < off_ ? on_ : off_) >= s;
            shuffled = !stored && on_ < off_;
        }
        const uint8_t *payload = row;
        if (shuffled) {
            byte_shuffle(row, scratch, width, shuffle);
            payload = scratch;
            mask = 1;
        }
        uint8_t *out = dst + off;
        int64_t size = width;
        if (!stored) {
            size_t got = fn(ctx, out + 1, (size_t)cap, payload, (size_t)width);
            if (got > (size_t)cap) {
                ends[k] = (int64_t)got;
                return k;
            }
            if ((int64_t)got == width)
                return -2;
            if ((int64_t)got < width) {
                mask |= (int64_t)1 << zbit;
                size = (int64_t)got;
            }
        }
        if (!(mask >> zbit & 1)) /* stored uncompressed: the plain or shuffled bytes */
            memcpy(out + 1, payload, (size_t)width);
        out[0] = (uint8_t)mask;
        off += 1 + size;
        ends[k] = off;
        masks[k] = mask;
    }
    return -1;
}
