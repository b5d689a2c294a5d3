/* sidecar_scan: agentuq sidecar JSONL files -> the Arrow buffers of io.ingest.sidecars.SIDECAR_SCHEMA's columns.

   Written by hand because no library turns JSON lines into Arrow columns near the cost of reading them:
   DuckDB's read_ndjson (io.ingest.sidecars' general path) spends ~1.4 us of CPU per 630-byte agentuq token row,
   pyarrow.json ~2.3x that and polars.read_ndjson ~3x (benchmarks/bench_pipeline.py); this scanner reads
   each byte once, with the GIL released.

   Its scope is deliberately narrow: standard JSON, one object per line, keys without escapes, each
   column's value of the column's own JSON type (or null), NaN/Infinity/-Infinity as Python writes them.
   Anything else - a value DuckDB would cast (a number for a string column, 3.0 for an integer), a
   duplicate key, a trailing comma, a byte that is not UTF-8, a lone surrogate, \u0000, a line that is not
   an object, a file that cannot be opened - stops the scan with `Unsupported`, and the caller parses the
   same files with DuckDB, which accepts them (giving its table) or refuses them (naming the file and
   line). So wherever this scanner gives a table, it is DuckDB's table, value for value
   (tests/test_sidecar_scan.py compares them on generated rows).

   Numbers are correctly rounded, as DuckDB (yyjson) and Python read them: Clinger's exact fast path,
   then one operation in x87 extended precision with a check for the only case where rounding twice can
   differ from rounding once (the 64-bit result lying exactly on a halfway point between doubles), then
   glibc's strtod_l (correctly rounded) in the C locale; on a platform without these the last resort is
   `Unsupported`.
*/
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strtod_l, newlocale */
#endif
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h> /* malloc_trim */
#endif

#if defined(__GLIBC__)
#define HAVE_STRTOD_L 1
#elif defined(__APPLE__)
#include <xlocale.h>
#define HAVE_STRTOD_L 1
#endif
#if (defined(__x86_64__) || defined(__i386__)) && LDBL_MANT_DIG == 64
#define HAVE_X87_LONG_DOUBLE 1
#endif

/* ------------------------------------------------------------------ columns */

enum { K_STR, K_I64, K_F64, K_LIST_STR, K_LIST_F64 };

typedef struct {
    const char *name;
    int kind;
} column_spec;

/* io.ingest.sidecars.SIDECAR_SCHEMA, in its order (checked there at import) */
static const column_spec COLUMNS[] = {
    {"message_timestamp", K_STR}, {"model", K_STR},         {"role", K_STR},
    {"turn_idx", K_I64},          {"message_idx", K_I64},   {"token_idx", K_I64},
    {"token", K_STR},             {"chosen_logprob", K_F64}, {"topk_tokens", K_LIST_STR},
    {"topk_logprobs", K_LIST_F64}, {"full_entropy", K_F64}, {"domain", K_STR},
    {"task_id", K_STR},           {"trial", K_I64},         {"seed", K_I64},
    {"scorer", K_STR},            {"source", K_STR},
};
#define NCOL ((int)(sizeof(COLUMNS) / sizeof(COLUMNS[0])))

typedef struct {
    char *p;
    size_t len, cap;
} vec;

typedef struct {
    vec valid;   /* one byte per row, 1 valid, 0 null: filled from the first null on (empty while none is) */
    vec offsets; /* int32 per row + 1: string or list offsets */
    vec data;    /* string bytes; int64 or double values */
    vec cvalid;  /* lists: one byte per element, as valid */
    vec coffsets; /* list of strings: int32 per element + 1 */
    vec cdata;   /* list elements: string bytes or doubles */
    int64_t nulls, cnulls, elements;
} column;

typedef struct {
    column cols[NCOL];
    int64_t rows;
    const char *why; /* set when the scan stops: what was not supported */
} scan_state;

static int vec_grow(vec *v, size_t extra) {
    size_t need = v->len + extra, cap = v->cap ? v->cap : 1024;
    while (cap < need) cap *= 2;
    char *p = realloc(v->p, cap);
    if (p == NULL) return -1;
    v->p = p;
    v->cap = cap;
    return 0;
}

#define VEC_RESERVE(v, n) ((v)->len + (n) <= (v)->cap || vec_grow((v), (n)) == 0)

static inline int vec_push(vec *v, const void *src, size_t n) {
    if (n == 0) return 0; /* memcpy to a vec with no memory yet would get NULL */
    if (!VEC_RESERVE(v, n)) return -1;
    memcpy(v->p + v->len, src, n);
    v->len += n;
    return 0;
}

static inline int vec_byte(vec *v, unsigned char b) {
    if (!VEC_RESERVE(v, 1)) return -1;
    v->p[v->len++] = (char)b;
    return 0;
}

/* -1: out of memory; -2: past int32, the offsets' type (the batch is then left to DuckDB) */
static inline int push_offset(vec *offsets, size_t value) {
    if (value > INT32_MAX) return -2;
    int32_t o = (int32_t)value;
    return vec_push(offsets, &o, sizeof o);
}

/* Record whether value `index` of a validity is valid; the bytes are written from the first null on. */
static inline int set_valid(vec *valid, int64_t *nulls, int64_t index, int ok) {
    if (ok) return *nulls == 0 ? 0 : vec_byte(valid, 1);
    if (*nulls == 0) { /* the first null: every value before it was valid */
        if (!VEC_RESERVE(valid, (size_t)index + 1)) return -1;
        memset(valid->p, 1, (size_t)index);
        valid->len = (size_t)index;
    }
    (*nulls)++;
    return vec_byte(valid, 0);
}

#define FAIL(st, reason) do { (st)->why = (reason); return NULL; } while (0)

static const char OUT_OF_MEMORY[] = "out of memory"; /* raised as MemoryError, not left to DuckDB */
static const char TOO_LARGE[] = "a batch over 2 GiB of text or 2^31 list elements (int32 offsets)";
/* A push that failed: out of memory, or an offset past int32. */
#define PUSHED(st, call) do { int pushed_ = (call); \
        if (pushed_ < 0) FAIL(st, pushed_ == -2 ? TOO_LARGE : OUT_OF_MEMORY); } while (0)

/* ------------------------------------------------------------------ lexing */

static inline const char *skip_ws(const char *p, const char *e) {
    if (p < e && *p == ' ') p++; /* json.dumps puts one space after ',' and ':' */
    if (p < e && (unsigned char)*p > ' ') return p;
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

static inline int is_digit(char c) { return (unsigned char)(c - '0') < 10; }

static inline int literal(const char *p, const char *e, const char *word, size_t n) {
    return (size_t)(e - p) >= n && memcmp(p, word, n) == 0;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* Eight ASCII digits at p, tested and read in a few word operations (the SWAR method of fast_float). */
static inline int eight_digits(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return ((v & UINT64_C(0xF0F0F0F0F0F0F0F0)) |
            (((v + UINT64_C(0x0606060606060606)) & UINT64_C(0xF0F0F0F0F0F0F0F0)) >> 4)) == UINT64_C(0x3333333333333333);
}

static inline uint64_t eight_digits_value(const char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    v -= UINT64_C(0x3030303030303030);
    v = (v * 10) + (v >> 8);
    v = (((v & UINT64_C(0x000000FF000000FF)) * (100 + (UINT64_C(1000000) << 32))) +
         (((v >> 16) & UINT64_C(0x000000FF000000FF)) * (1 + (UINT64_C(10000) << 32)))) >> 32;
    return v;
}

/* Past the plain bytes at p: up to a '"', a '\\', a control character or a byte >= 0x80 (or e), eight
   bytes at a step. The lowest flagged byte of each test is exact (a false flag only follows a true one). */
static inline const char *plain_run(const char *p, const char *e) {
    const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080);
    while (e - p >= 8) {
        uint64_t v, q, b;
        memcpy(&v, p, 8);
        q = v ^ (ones * '"');
        b = v ^ (ones * '\\');
        uint64_t flags = (((v - ones * 0x20) & ~v) | ((q - ones) & ~q) | ((b - ones) & ~b) | v) & highs;
        if (flags) return p + (__builtin_ctzll(flags) >> 3);
        p += 8;
    }
    while (p < e) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        p++;
    }
    return p;
}
#define HAVE_SWAR 1
#else
static inline const char *plain_run(const char *p, const char *e) {
    while (p < e) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        p++;
    }
    return p;
}
#endif

/* Length of the valid UTF-8 sequence starting at p (a byte >= 0x80), 0 if it is not one. */
static int utf8_sequence(const unsigned char *p, const unsigned char *e) {
    unsigned c = p[0];
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (e - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (e - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) return 0; /* overlong; surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (e - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) return 0; /* overlong; > U+10FFFF */
        return 4;
    }
    return 0;
}

static int hex4(const char *p, const char *e) {
    if (e - p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int push_utf8(vec *out, unsigned code) {
    unsigned char b[4];
    size_t n;
    if (code < 0x80) { b[0] = (unsigned char)code; n = 1; }
    else if (code < 0x800) { b[0] = 0xC0 | (code >> 6); b[1] = 0x80 | (code & 0x3F); n = 2; }
    else if (code < 0x10000) {
        b[0] = 0xE0 | (code >> 12); b[1] = 0x80 | ((code >> 6) & 0x3F); b[2] = 0x80 | (code & 0x3F); n = 3;
    } else {
        b[0] = 0xF0 | (code >> 18); b[1] = 0x80 | ((code >> 12) & 0x3F);
        b[2] = 0x80 | ((code >> 6) & 0x3F); b[3] = 0x80 | (code & 0x3F); n = 4;
    }
    return vec_push(out, b, n);
}

/* A JSON string at p (its opening quote); its decoded bytes are appended to out (unless out is NULL).
   Returns the position after the closing quote, or NULL. */
static const char *scan_string(scan_state *st, const char *p, const char *e, vec *out) {
    const char *run = ++p;
    for (;;) {
        p = plain_run(p, e);
        if (p >= e) FAIL(st, "a string runs to the end of the line");
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            if (out != NULL) PUSHED(st, vec_push(out, run, (size_t)(p - run)));
            return p + 1;
        }
        if (c >= 0x80) {
            int n = utf8_sequence((const unsigned char *)p, (const unsigned char *)e);
            if (n == 0) FAIL(st, "a string holds bytes that are not UTF-8");
            p += n;
            continue;
        }
        if (c < 0x20) FAIL(st, "a control character in a string");
        /* a backslash */
        if (out != NULL) PUSHED(st, vec_push(out, run, (size_t)(p - run)));
        if (++p >= e) FAIL(st, "a string runs to the end of the line");
        unsigned char decoded;
        switch (*p) {
            case '"': decoded = '"'; break;
            case '\\': decoded = '\\'; break;
            case '/': decoded = '/'; break;
            case 'b': decoded = '\b'; break;
            case 'f': decoded = '\f'; break;
            case 'n': decoded = '\n'; break;
            case 'r': decoded = '\r'; break;
            case 't': decoded = '\t'; break;
            case 'u': {
                int code = hex4(p + 1, e);
                if (code <= 0) FAIL(st, code == 0 ? "\\u0000 in a string" : "a bad \\u escape");
                p += 5;
                if (code >= 0xDC00 && code <= 0xDFFF) FAIL(st, "a lone low surrogate");
                if (code >= 0xD800 && code <= 0xDBFF) {
                    int low = (e - p >= 6 && p[0] == '\\' && p[1] == 'u') ? hex4(p + 2, e) : -1;
                    if (low < 0xDC00 || low > 0xDFFF) FAIL(st, "a lone high surrogate");
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                }
                if (out != NULL) PUSHED(st, push_utf8(out, (unsigned)code));
                run = p;
                continue;
            }
            default: FAIL(st, "an unknown escape in a string");
        }
        if (out != NULL) PUSHED(st, vec_byte(out, decoded));
        run = ++p;
    }
}

/* ------------------------------------------------------------------ numbers */

static const double P10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#ifdef HAVE_X87_LONG_DOUBLE
/* 10^k for k <= 27 is exact in a 64-bit significand (5^27 < 2^64) */
static const long double LP10[] = {1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
                                   1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
                                   1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
#endif
#ifdef HAVE_STRTOD_L
static locale_t C_LOCALE;
#endif


/* Past the digits at p. */
static inline const char *skip_digits(const char *p, const char *e) {
#ifdef HAVE_SWAR
    while (e - p >= 8 && eight_digits(p)) p += 8;
#endif
    while (p < e && is_digit(*p)) p++;
    return p;
}

/* A JSON number (or NaN, Infinity, -Infinity) at p, checked and skipped without its value. */
static const char *skip_number(scan_state *st, const char *p, const char *e) {
    int negative = *p == '-';
    if (negative && ++p >= e) FAIL(st, "a bad number");
    if (*p == 'I') {
        if (literal(p, e, "Infinity", 8)) return p + 8;
        FAIL(st, "a bad literal");
    }
    if (*p == 'N') {
        if (!negative && literal(p, e, "NaN", 3)) return p + 3;
        FAIL(st, "a bad literal");
    }
    if (*p == '0') {
        p++;
        if (p < e && is_digit(*p)) FAIL(st, "a number with a leading zero");
    } else if (is_digit(*p)) {
        p = skip_digits(p, e);
    } else {
        FAIL(st, "a value that is not JSON");
    }
    if (p < e && *p == '.') {
        if (++p >= e || !is_digit(*p)) FAIL(st, "a bad number");
        p = skip_digits(p, e);
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        if (++p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !is_digit(*p)) FAIL(st, "a bad number");
        p = skip_digits(p, e);
    }
    return p;
}

/* The JSON number (or NaN, Infinity, -Infinity) at p, as the double DuckDB reads: correctly rounded, and
   an integer (no fraction, no exponent) read as an integer first, so "-0" is 0.0 while "-0.0" is -0.0. */
static const char *scan_double(scan_state *st, const char *p, const char *e, double *out) {
    const char *start = p;
    int negative = 0;
    if (*p == '-') {
        negative = 1;
        if (++p >= e) FAIL(st, "a bad number");
    }
    if (*p == 'I') {
        if (literal(p, e, "Infinity", 8)) {
            *out = negative ? -HUGE_VAL : HUGE_VAL;
            return p + 8;
        }
        FAIL(st, "a bad literal");
    }
    if (*p == 'N') {
        if (!negative && literal(p, e, "NaN", 3)) {
            *out = NAN;
            return p + 3;
        }
        FAIL(st, "a bad literal");
    }
    /* m holds the first (at most 19) digits, so m < 10^digits <= 10^19 < 2^64; e10 its power of ten */
    uint64_t m = 0;
    int digits = 0, inexact = 0, integer = 1;
    int64_t e10 = 0;
    if (*p == '0') {
        p++;
        if (p < e && is_digit(*p)) FAIL(st, "a number with a leading zero");
    } else if (is_digit(*p)) {
        for (; p < e && is_digit(*p); p++) {
            if (digits < 19) { m = m * 10 + (uint64_t)(*p - '0'); digits++; }
            else { e10++; inexact |= *p != '0'; }
        }
    } else {
        FAIL(st, "a value that is not JSON");
    }
    if (p < e && *p == '.') {
        integer = 0;
        if (++p >= e || !is_digit(*p)) FAIL(st, "a bad number");
#ifdef HAVE_SWAR
        while (digits <= 11 && e - p >= 8 && eight_digits(p)) { /* leading zeros count here: a tighter bound */
            m = m * 100000000 + eight_digits_value(p);
            digits += 8;
            e10 -= 8;
            p += 8;
        }
#endif
        for (; p < e && is_digit(*p); p++) {
            if (digits < 19) {
                if (m != 0 || *p != '0') { m = m * 10 + (uint64_t)(*p - '0'); digits++; }
                e10--;
            } else {
                inexact |= *p != '0';
            }
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        integer = 0;
        int exp_negative = 0;
        if (++p < e && (*p == '+' || *p == '-')) exp_negative = *p++ == '-';
        if (p >= e || !is_digit(*p)) FAIL(st, "a bad number");
        int64_t x = 0;
        for (; p < e && is_digit(*p); p++)
            if (x < 100000) x = x * 10 + (*p - '0');
        e10 += exp_negative ? -x : x;
    }
    if (m == 0 && !inexact) {
        *out = (negative && !integer) ? -0.0 : 0.0;
        return p;
    }
    if (!inexact) {
#if FLT_EVAL_METHOD == 0
        if (m <= (UINT64_C(1) << 53) && e10 >= -22 && e10 <= 22) { /* Clinger: exact operands, one rounding */
            double d = (double)m;
            d = e10 < 0 ? d / P10[-e10] : d * P10[e10];
            *out = negative ? -d : d;
            return p;
        }
#endif
#ifdef HAVE_X87_LONG_DOUBLE
        if (e10 >= -27 && e10 <= 27) {
            long double x = (long double)m; /* exact: m < 2^64 */
            long double y = e10 < 0 ? x / LP10[-e10] : x * LP10[e10]; /* rounded once, to 64 bits */
            uint64_t significand;
            memcpy(&significand, &y, sizeof significand); /* the x87 format's low 8 bytes */
            /* rounding to 53 bits then equals rounding the exact value, unless the 64-bit result lies on a
               halfway point (bits below the double's: 1 then ten 0s), where the exact value may not */
            if ((significand & 0x7FF) != 0x400) {
                double d = (double)y;
                *out = negative ? -d : d;
                return p;
            }
        }
#endif
    }
#ifdef HAVE_STRTOD_L
    {
        char buf[512];
        size_t n = (size_t)(p - start);
        if (n >= sizeof buf) FAIL(st, "a number too long");
        memcpy(buf, start, n);
        buf[n] = '\0';
        char *end;
        errno = 0;
        double d = strtod_l(buf, &end, C_LOCALE);
        if (end != buf + n || errno == ERANGE || !isfinite(d)) FAIL(st, "a number out of range");
        *out = d;
        return p;
    }
#else
    FAIL(st, "a number beyond the fast paths");
#endif
}

static const char *scan_int(scan_state *st, const char *p, const char *e, int64_t *out) {
    int negative = 0;
    if (*p == '-') {
        negative = 1;
        if (++p >= e) FAIL(st, "a bad number");
    }
    uint64_t v = 0;
    if (*p == '0') {
        p++;
        if (p < e && is_digit(*p)) FAIL(st, "a number with a leading zero");
    } else if (is_digit(*p)) {
        for (; p < e && is_digit(*p); p++) {
            if (v > (UINT64_C(1) << 63) / 10) FAIL(st, "an integer out of range");
            v = v * 10 + (uint64_t)(*p - '0');
        }
    } else {
        FAIL(st, "an integer column holds a value that is not a number");
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E')) FAIL(st, "an integer column holds a fraction");
    if (v > (negative ? (UINT64_C(1) << 63) : (UINT64_C(1) << 63) - 1)) FAIL(st, "an integer out of range");
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return p;
}

/* ------------------------------------------------------------------ values */

/* Any JSON value at p (after whitespace), checked and skipped. */
static const char *skip_value(scan_state *st, const char *p, const char *e, int depth) {
    if (depth > 64) FAIL(st, "values nested too deep");
    p = skip_ws(p, e);
    if (p >= e) FAIL(st, "a value is missing");
    switch (*p) {
        case '"':
            return scan_string(st, p, e, NULL);
        case '{':
            p = skip_ws(p + 1, e);
            if (p < e && *p == '}') return p + 1;
            for (;;) {
                p = skip_ws(p, e);
                if (p >= e || *p != '"') FAIL(st, "an object key is not a string");
                if ((p = scan_string(st, p, e, NULL)) == NULL) return NULL;
                p = skip_ws(p, e);
                if (p >= e || *p != ':') FAIL(st, "a key without ':'");
                if ((p = skip_value(st, p + 1, e, depth + 1)) == NULL) return NULL;
                p = skip_ws(p, e);
                if (p < e && *p == ',') { p++; continue; }
                if (p < e && *p == '}') return p + 1;
                FAIL(st, "an object is not closed");
            }
        case '[':
            p = skip_ws(p + 1, e);
            if (p < e && *p == ']') return p + 1;
            for (;;) {
                if ((p = skip_value(st, p, e, depth + 1)) == NULL) return NULL;
                p = skip_ws(p, e);
                if (p < e && *p == ',') { p++; continue; }
                if (p < e && *p == ']') return p + 1;
                FAIL(st, "an array is not closed");
            }
        case 't':
            if (literal(p, e, "true", 4)) return p + 4;
            FAIL(st, "a bad literal");
        case 'f':
            if (literal(p, e, "false", 5)) return p + 5;
            FAIL(st, "a bad literal");
        case 'n':
            if (literal(p, e, "null", 4)) return p + 4;
            FAIL(st, "a bad literal");
        default:
            return skip_number(st, p, e);
    }
}

static int push_null(column *c, int kind, int64_t row) {
    static const char zeros[8] = {0};
    if (set_valid(&c->valid, &c->nulls, row, 0) < 0) return -1;
    switch (kind) {
        case K_I64:
        case K_F64:
            return vec_push(&c->data, zeros, 8);
        case K_STR:
            return push_offset(&c->offsets, c->data.len);
        default:
            return push_offset(&c->offsets, (size_t)c->elements);
    }
}

/* The value of column c (of kind `kind`) at p. */
static const char *scan_column_value(scan_state *st, column *c, int kind, const char *p, const char *e) {
    if (*p == 'n') {
        if (!literal(p, e, "null", 4)) FAIL(st, "a bad literal");
        PUSHED(st, push_null(c, kind, st->rows));
        return p + 4;
    }
    switch (kind) {
        case K_STR:
            if (*p != '"') FAIL(st, "a string column holds another type");
            if ((p = scan_string(st, p, e, &c->data)) == NULL) return NULL;
            PUSHED(st, push_offset(&c->offsets, c->data.len));
            break;
        case K_I64: {
            int64_t v;
            if ((p = scan_int(st, p, e, &v)) == NULL) return NULL;
            PUSHED(st, vec_push(&c->data, &v, 8));
            break;
        }
        case K_F64: {
            double v;
            if (*p == 't' || *p == 'f' || *p == '"' || *p == '[' || *p == '{') FAIL(st, "a number column holds another type");
            if ((p = scan_double(st, p, e, &v)) == NULL) return NULL;
            PUSHED(st, vec_push(&c->data, &v, 8));
            break;
        }
        default: { /* a list */
            if (*p != '[') FAIL(st, "a list column holds another type");
            p = skip_ws(p + 1, e);
            if (p < e && *p == ']') {
                p++;
            } else {
                for (;;) {
                    p = skip_ws(p, e);
                    if (p >= e) FAIL(st, "a list is not closed");
                    int64_t element = c->elements++;
                    if (*p == 'n') {
                        if (!literal(p, e, "null", 4)) FAIL(st, "a bad literal");
                        p += 4;
                        PUSHED(st, set_valid(&c->cvalid, &c->cnulls, element, 0));
                        if (kind == K_LIST_STR)
                            PUSHED(st, push_offset(&c->coffsets, c->cdata.len));
                        else
                            PUSHED(st, vec_push(&c->cdata, "\0\0\0\0\0\0\0\0", 8));
                    } else if (kind == K_LIST_STR) {
                        if (*p != '"') FAIL(st, "a list of strings holds another type");
                        if ((p = scan_string(st, p, e, &c->cdata)) == NULL) return NULL;
                        PUSHED(st, set_valid(&c->cvalid, &c->cnulls, element, 1));
                        PUSHED(st, push_offset(&c->coffsets, c->cdata.len));
                    } else {
                        double v;
                        if (*p == 't' || *p == 'f' || *p == '"' || *p == '[' || *p == '{')
                            FAIL(st, "a list of numbers holds another type");
                        if ((p = scan_double(st, p, e, &v)) == NULL) return NULL;
                        PUSHED(st, set_valid(&c->cvalid, &c->cnulls, element, 1));
                        PUSHED(st, vec_push(&c->cdata, &v, 8));
                    }
                    p = skip_ws(p, e);
                    if (p < e && *p == ',') { p++; continue; }
                    if (p < e && *p == ']') { p++; break; }
                    FAIL(st, "a list is not closed");
                }
            }
            PUSHED(st, push_offset(&c->offsets, (size_t)c->elements));
            break;
        }
    }
    PUSHED(st, set_valid(&c->valid, &c->nulls, st->rows, 1));
    return p;
}

/* The column a key names (-1: none). Compared by constant-size memcmp, which compilers inline. */
static inline int column_of(const char *k, size_t n) {
#define IS(name) (memcmp(k, name, sizeof(name) - 1) == 0)
    switch (n) {
        case 4: return IS("role") ? 2 : IS("seed") ? 14 : -1;
        case 5: return IS("token") ? 6 : IS("model") ? 1 : IS("trial") ? 13 : -1;
        case 6: return IS("domain") ? 11 : IS("scorer") ? 15 : IS("source") ? 16 : -1;
        case 7: return IS("task_id") ? 12 : -1;
        case 8: return IS("turn_idx") ? 3 : -1;
        case 9: return IS("token_idx") ? 5 : -1;
        case 11: return IS("topk_tokens") ? 8 : IS("message_idx") ? 4 : -1;
        case 12: return IS("full_entropy") ? 10 : -1;
        case 13: return IS("topk_logprobs") ? 9 : -1;
        case 14: return IS("chosen_logprob") ? 7 : -1;
        case 17: return IS("message_timestamp") ? 0 : -1;
        default: return -1;
    }
#undef IS
}

/* One line holding an object (p at '{', e the end of the line); a row is added. */
static const char *scan_row(scan_state *st, const char *p, const char *e) {
    uint32_t seen = 0;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') {
        p++;
    } else {
        for (;;) {
            if (p >= e || *p != '"') FAIL(st, "an object key is not a string");
            const char *key = p + 1, *q = plain_run(key, e);
            int c;
            if (q < e && *q == '"') {
                c = column_of(key, (size_t)(q - key));
                p = q + 1;
            } else if (q < e && *q == '\\') {
                FAIL(st, "an escape in a key");
            } else { /* a key with other bytes: no column's; checked as any string */
                if ((p = scan_string(st, p, e, NULL)) == NULL) return NULL;
                c = -1;
            }
            p = skip_ws(p, e);
            if (p >= e || *p != ':') FAIL(st, "a key without ':'");
            p = skip_ws(p + 1, e);
            if (p >= e) FAIL(st, "a value is missing");
            if (c < 0) {
                p = skip_value(st, p, e, 1);
            } else {
                if (seen & (UINT32_C(1) << c)) FAIL(st, "a duplicate key");
                seen |= UINT32_C(1) << c;
                p = scan_column_value(st, &st->cols[c], COLUMNS[c].kind, p, e);
            }
            if (p == NULL) return NULL;
            p = skip_ws(p, e);
            if (p < e && *p == ',') {
                p = skip_ws(p + 1, e);
                continue;
            }
            if (p < e && *p == '}') { p++; break; }
            FAIL(st, "an object is not closed");
        }
    }
    for (int c = 0; c < NCOL; c++)
        if (!(seen & (UINT32_C(1) << c))) PUSHED(st, push_null(&st->cols[c], COLUMNS[c].kind, st->rows));
    st->rows++;
    return p;
}

/* Complete lines in [p, e) (the last one may lack its newline when `last` is set). Counts lines and rows. */
static int scan_lines(scan_state *st, const char *p, const char *e, int64_t *lines, int64_t *line_no) {
    while (p < e) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        const char *end = nl ? nl : e;
        (*lines)++;
        (*line_no)++;
        const char *q = skip_ws(p, end);
        if (q < end) { /* a blank line (only whitespace) makes no row, as in DuckDB */
            if (*q != '{') { st->why = "a line that is not an object"; return -1; }
            q = scan_row(st, q, end);
            if (q == NULL) return -1;
            if (skip_ws(q, end) != end) { st->why = "content after the object"; return -1; }
        }
        p = nl ? nl + 1 : e;
    }
    return 0;
}

/* ------------------------------------------------------------------ files */

typedef struct {
    char *p;
    size_t cap;
} read_buffer;

/* The last newline in [p, p + n), or NULL (memrchr is a GNU extension). */
static const char *last_newline(const char *p, size_t n) {
    while (n > 0)
        if (p[--n] == '\n') return p + n;
    return NULL;
}

/* Scan one file in blocks of complete lines. Returns 0, or -1 with st->why set. */
static int scan_file(scan_state *st, const char *path, read_buffer *buf, size_t block, int64_t *lines,
                     int64_t *line_no) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { st->why = "the file cannot be opened"; return -1; }
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        close(fd);
        st->why = "not a regular file";
        return -1;
    }
    size_t have = 0;
    int status = 0, eof = 0;
    while (!eof) {
        if (buf->cap - have < block / 2) { /* room for a read: grow (a line longer than the block) */
            size_t cap = buf->cap ? buf->cap * 2 : block;
            while (cap - have < block / 2) cap *= 2;
            char *p = realloc(buf->p, cap);
            if (p == NULL) { st->why = OUT_OF_MEMORY; status = -1; break; }
            buf->p = p;
            buf->cap = cap;
        }
        ssize_t n = read(fd, buf->p + have, buf->cap - have);
        if (n < 0) {
            if (errno == EINTR) continue;
            st->why = "the file cannot be read";
            status = -1;
            break;
        }
        eof = n == 0;
        size_t held = have; /* bytes kept from the last read: part of one line, no newline */
        have += (size_t)n;
        const char *end;
        if (eof) {
            end = buf->p + have;
        } else {
            end = last_newline(buf->p + held, (size_t)n);
            if (end == NULL) continue; /* no complete line yet: read on */
            end++;
        }
        if (scan_lines(st, buf->p, end, lines, line_no) < 0) { status = -1; break; }
        size_t used = (size_t)(end - buf->p);
        memmove(buf->p, end, have - used);
        have -= used;
    }
    close(fd);
    return status;
}

/* ------------------------------------------------------------------ Python objects */

/* Memory handed to Python: a read-only buffer that frees its block when the last view is gone. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Block;

static void Block_dealloc(Block *self) {
    free(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Block_getbuffer(Block *self, Py_buffer *view, int flags) {
    static char empty[8];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : empty, self->len, 1, flags);
}

static PyBufferProcs Block_as_buffer = {(getbufferproc)Block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agentuq_nb.io.ingest.sidecar_scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = (destructor)Block_dealloc,
    .tp_as_buffer = &Block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A block of memory filled by the scanner (a read-only buffer).",
};

/* The vec's memory as a Block (the vec gives it up). */
static PyObject *block_of(vec *v) {
    Block *b = PyObject_New(Block, &BlockType);
    if (b == NULL) return NULL;
    if (v->len > 0 && v->len < v->cap) { /* capacities double: hand Python only what is used */
        char *p = realloc(v->p, v->len);
        if (p != NULL) v->p = p;
    }
    b->p = v->p;
    b->len = (Py_ssize_t)v->len;
    v->p = NULL;
    v->len = v->cap = 0;
    return (PyObject *)b;
}

static PyObject *block_or_none(vec *v, int64_t nulls) {
    if (nulls == 0) Py_RETURN_NONE;
    return block_of(v);
}

static void free_state(scan_state *st) {
    for (int c = 0; c < NCOL; c++) {
        vec *vs[] = {&st->cols[c].valid, &st->cols[c].offsets, &st->cols[c].data,
                     &st->cols[c].cvalid, &st->cols[c].coffsets, &st->cols[c].cdata};
        for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) free(vs[i]->p);
    }
}

static PyObject *Unsupported;

static PyObject *columns_tuple(scan_state *st) {
    PyObject *out = PyTuple_New(NCOL);
    if (out == NULL) return NULL;
    for (int c = 0; c < NCOL; c++) {
        column *col = &st->cols[c];
        PyObject *item;
        switch (COLUMNS[c].kind) {
            case K_STR:
                item = Py_BuildValue("(NNN)", block_or_none(&col->valid, col->nulls), block_of(&col->offsets),
                                     block_of(&col->data));
                break;
            case K_I64:
            case K_F64:
                item = Py_BuildValue("(NN)", block_or_none(&col->valid, col->nulls), block_of(&col->data));
                break;
            case K_LIST_STR:
                item = Py_BuildValue("(NNNNN)", block_or_none(&col->valid, col->nulls), block_of(&col->offsets),
                                     block_or_none(&col->cvalid, col->cnulls), block_of(&col->coffsets),
                                     block_of(&col->cdata));
                break;
            default:
                item = Py_BuildValue("(NNNN)", block_or_none(&col->valid, col->nulls), block_of(&col->offsets),
                                     block_or_none(&col->cvalid, col->cnulls), block_of(&col->cdata));
                break;
        }
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, c, item);
    }
    return out;
}

PyDoc_STRVAR(scan_doc,
"scan(paths, block_bytes=8 MiB) -> (rows, lines, columns)\n\n"
"Parse sidecar files (a list of bytes paths) into the columns of SIDECAR_SCHEMA, rows in file order.\n"
"rows and lines: bytes holding an int64 per file (its rows; its lines, a last line without newline\n"
"counted). columns: one tuple of buffers per column (see COLUMNS): a string column (validity, offsets,\n"
"data); an integer or float column (validity, values); a list of strings (validity, offsets, element\n"
"validity, element offsets, element data); a list of floats (validity, offsets, element validity,\n"
"values). A validity is a byte per row (1 valid) or None when none is null; offsets are int32.\n"
"Raises Unsupported(file_index, line, reason) on anything beyond its scope (the caller then parses\n"
"the files otherwise), MemoryError when an allocation fails. The GIL is released while it reads.");

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"paths", "block_bytes", NULL};
    PyObject *paths_obj;
    Py_ssize_t block = 8 << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|n", keywords, &paths_obj, &block)) return NULL;
    if (block < 4096) block = 4096;
    /* a tuple of its own: the names are read with the GIL released, when the caller's list could change */
    PyObject *paths = PySequence_Tuple(paths_obj);
    if (paths == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(paths);
    const char **names = PyMem_Calloc((size_t)(n ? n : 1), sizeof(char *));
    int64_t *rows = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int64_t));
    int64_t *lines = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int64_t));
    if (names == NULL || rows == NULL || lines == NULL) {
        PyMem_Free(names); PyMem_Free(rows); PyMem_Free(lines);
        Py_DECREF(paths);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(paths, i);
        char *name;
        Py_ssize_t size;
        if (!PyBytes_Check(item) || PyBytes_AsStringAndSize(item, &name, &size) < 0 || (size_t)size != strlen(name)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyBytes_Check(item) ? PyExc_ValueError : PyExc_TypeError,
                                PyBytes_Check(item) ? "embedded null byte in a path" : "paths must be bytes (os.fsencode)");
            PyMem_Free(names); PyMem_Free(rows); PyMem_Free(lines);
            Py_DECREF(paths);
            return NULL;
        }
        names[i] = name;
    }
    scan_state *st = calloc(1, sizeof(scan_state));
    if (st == NULL) {
        PyMem_Free(names); PyMem_Free(rows); PyMem_Free(lines);
        Py_DECREF(paths);
        return PyErr_NoMemory();
    }
    read_buffer buf = {NULL, 0};
    int status = 0;
    Py_ssize_t failed = -1;
    int64_t line_no = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int c = 0; c < NCOL && status == 0; c++) /* offsets start at 0 */
        if (COLUMNS[c].kind != K_I64 && COLUMNS[c].kind != K_F64)
            status = push_offset(&st->cols[c].offsets, 0);
    for (int c = 0; c < NCOL && status == 0; c++)
        if (COLUMNS[c].kind == K_LIST_STR) status = push_offset(&st->cols[c].coffsets, 0);
    if (status != 0) st->why = OUT_OF_MEMORY;
    for (Py_ssize_t i = 0; i < n && status == 0; i++) {
        int64_t before = st->rows;
        line_no = 0;
        status = scan_file(st, names[i], &buf, (size_t)block, &lines[i], &line_no);
        rows[i] = st->rows - before;
        if (status != 0) failed = i;
    }
    free(buf.p);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (status != 0 && st->why == OUT_OF_MEMORY) {
        PyErr_NoMemory();
    } else if (status != 0) {
        PyObject *err = Py_BuildValue("(nLs)", failed, (long long)line_no, st->why ? st->why : "unknown");
        if (err != NULL) {
            PyErr_SetObject(Unsupported, err);
            Py_DECREF(err);
        }
    } else {
        PyObject *columns = columns_tuple(st);
        if (columns != NULL) {
            result = Py_BuildValue("(y#y#N)", (const char *)rows, (Py_ssize_t)(n * 8), (const char *)lines,
                                   (Py_ssize_t)(n * 8), columns);
        }
    }
    free_state(st);
    free(st);
    PyMem_Free(names);
    PyMem_Free(rows);
    PyMem_Free(lines);
    Py_DECREF(paths);
    return result;
}

PyDoc_STRVAR(trim_doc,
"trim() -> None\n\n"
"Hand the heap memory freed since (the scanner's blocks, once their tables are gone) back to the system\n"
"(glibc keeps it otherwise; elsewhere nothing to do).");

static PyObject *trim(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args)) {
#if defined(__GLIBC__)
    Py_BEGIN_ALLOW_THREADS
    malloc_trim(0);
    Py_END_ALLOW_THREADS
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_VARARGS | METH_KEYWORDS, scan_doc},
    {"trim", trim, METH_NOARGS, trim_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "sidecar_scan",
    "agentuq sidecar JSONL -> Arrow column buffers (the fast path of io.ingest.sidecars; see the C source's header).",
    -1, methods,
};

PyMODINIT_FUNC PyInit_sidecar_scan(void) {
    for (int c = 0; c < NCOL; c++) /* column_of and COLUMNS agree */
        if (column_of(COLUMNS[c].name, strlen(COLUMNS[c].name)) != c) {
            PyErr_Format(PyExc_ImportError, "sidecar_scan: column_of(%s) is wrong", COLUMNS[c].name);
            return NULL;
        }
#ifdef HAVE_STRTOD_L
    C_LOCALE = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (C_LOCALE == (locale_t)0) return PyErr_NoMemory();
#endif
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Unsupported = PyErr_NewExceptionWithDoc(
        "agentuq_nb.io.ingest.sidecar_scan.Unsupported",
        "The files hold something beyond the scanner's scope: args (file index, line, reason).",
        PyExc_ValueError, NULL);
    if (Unsupported == NULL || PyModule_AddObjectRef(m, "Unsupported", Unsupported) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *columns = PyTuple_New(NCOL);
    if (columns == NULL) { Py_DECREF(m); return NULL; }
    static const char *KINDS[] = {"string", "int64", "double", "list<string>", "list<double>"};
    for (int c = 0; c < NCOL; c++) {
        PyObject *item = Py_BuildValue("(ss)", COLUMNS[c].name, KINDS[COLUMNS[c].kind]);
        if (item == NULL) {
            Py_DECREF(columns);
            Py_DECREF(m);
            return NULL;
        }
        PyTuple_SET_ITEM(columns, c, item);
    }
    if (PyModule_AddObject(m, "COLUMNS", columns) < 0) {
        Py_DECREF(columns);
        Py_DECREF(m);
        return NULL;
    }
#ifdef HAVE_X87_LONG_DOUBLE
    int extended = 1;
#else
    int extended = 0;
#endif
    if (PyModule_AddIntConstant(m, "EXTENDED_PRECISION", extended) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
