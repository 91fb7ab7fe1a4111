/* Kineto events straight into columns: the reader's fast path (trace/torch_profiler/kineto_native.py).
 *
 * Scanner.scan(block) reads one JSON array of events and returns its columns as bytearrays, or None when the
 * block is anything but the common, well-typed case: invalid JSON, a field of an unexpected type, a duplicated
 * field, an escaped key, a value out of range. None sends the block to the msgspec path, which then decides
 * exactly as it always has (it raises on invalid JSON, so a wrong cut is still found by the decoder). This file
 * must therefore never accept what msgspec rejects, and never read a value differently: when in doubt, bail.
 *
 * Strings the columns name (categories, names, string thread ids, raw shape/type/concrete-input texts) are
 * interned here by their raw bytes, in order of first appearance; the caller turns each new entry into text once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 256
#define MAX_NUMBER 64

/* ---- intern tables ------------------------------------------------------------------------------------- */
typedef struct {
    uint64_t *hash;        /* per slot; 0 = empty */
    int32_t *slot_id;      /* per slot */
    Py_ssize_t cap;        /* slots, a power of two */
    char **key;            /* per id */
    Py_ssize_t *len;       /* per id */
    Py_ssize_t n, key_cap, reported;
} Table;

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s, (size_t)n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return h ? h : 1;
}

static void table_free(Table *t) {
    for (Py_ssize_t i = 0; i < t->n; i++) PyMem_RawFree(t->key[i]);
    PyMem_RawFree(t->key); PyMem_RawFree(t->len); PyMem_RawFree(t->hash); PyMem_RawFree(t->slot_id);
    memset(t, 0, sizeof(*t));
}

static int table_grow(Table *t) {
    Py_ssize_t cap = t->cap ? t->cap * 2 : 1024;
    uint64_t *hash = PyMem_RawCalloc(cap, sizeof(uint64_t));
    int32_t *ids = PyMem_RawCalloc(cap, sizeof(int32_t));
    if (!hash || !ids) { PyMem_RawFree(hash); PyMem_RawFree(ids); return -1; }
    for (Py_ssize_t i = 0; i < t->cap; i++) {
        if (!t->hash[i]) continue;
        Py_ssize_t j = (Py_ssize_t)(t->hash[i] & (uint64_t)(cap - 1));
        while (hash[j]) j = (j + 1) & (cap - 1);
        hash[j] = t->hash[i]; ids[j] = t->slot_id[i];
    }
    PyMem_RawFree(t->hash); PyMem_RawFree(t->slot_id);
    t->hash = hash; t->slot_id = ids; t->cap = cap;
    return 0;
}

/* The id of s[0..n), added if new; -1 on memory error or a table beyond int32. */
static int32_t table_id(Table *t, const char *s, Py_ssize_t n) {
    if ((t->n + 1) * 2 > t->cap && table_grow(t) < 0) return -1;
    uint64_t h = hash_bytes(s, n);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->hash[j]) {
        if (t->hash[j] == h) {
            int32_t id = t->slot_id[j];
            if (t->len[id] == n && memcmp(t->key[id], s, (size_t)n) == 0) return id;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (t->n >= INT32_MAX - 1) return -1;
    if (t->n == t->key_cap) {
        Py_ssize_t cap = t->key_cap ? t->key_cap * 2 : 1024;
        char **key = PyMem_RawRealloc(t->key, cap * sizeof(char *));
        if (!key) return -1;
        t->key = key;
        Py_ssize_t *len = PyMem_RawRealloc(t->len, cap * sizeof(Py_ssize_t));
        if (!len) return -1;
        t->len = len; t->key_cap = cap;
    }
    char *copy = PyMem_RawMalloc(n ? (size_t)n : 1);
    if (!copy) return -1;
    memcpy(copy, s, (size_t)n);
    int32_t id = (int32_t)t->n;
    t->key[id] = copy; t->len[id] = n; t->n++;
    t->hash[j] = h; t->slot_id[j] = id;
    return id;
}

/* ---- columns ------------------------------------------------------------------------------------------- */
enum { C_PH, C_CAT, C_NAME, C_TS, C_DUR, C_TID, C_TIDSTR, C_ID, C_STREAM, C_DEVICE, C_CORR, C_EXT, C_EXT2021,
       C_BYTES, C_GRID, C_BLOCK, C_DIMS, C_TYPES, C_CONCRETE, C_COLL, C_START, C_END, N_COLS };
static const int WIDTH[N_COLS] = {1, 4, 4, 8, 8, 8, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 1, 8, 8};
enum { T_CAT, T_NAME, T_TIDSTR, T_DIMS, T_TYPES, T_CONCRETE, N_TABLES };

typedef struct {
    int8_t ph, coll;
    int32_t cat, name, tidstr, dims, types, concrete;
    double ts, dur, bytes;
    int64_t tid, id, stream, device, corr, ext, ext2021, grid, block, start, end;
} Row;

typedef struct {
    PyObject_HEAD
    Table tables[N_TABLES];
    int busy;
} Scanner;

/* The scan runs without the GIL (two threads may scan two halves of a file); `save` is the thread state to
 * take it back with, for the one call that needs it (CPython's strtod). */
typedef struct {
    const unsigned char *p, *end, *base;
    Scanner *sc;
    int oom;
    PyThreadState *save;
} Cur;

#define BAIL return -1

/* bytes a string scan must stop at: the quote, the backslash, control characters, non-ASCII */
static unsigned char STOP[256];

static void init_stop(void) {
    for (int i = 0; i < 256; i++) STOP[i] = (i < 0x20 || i >= 0x80 || i == '"' || i == '\\');
}

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* One well-formed UTF-8 sequence starting at p (a byte >= 0x80); its length, or 0 if not well formed. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char b = p[0];
    int n; uint32_t cp;
    if (b >= 0xC2 && b <= 0xDF) { n = 2; cp = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { n = 3; cp = b & 0x0F; }
    else if (b >= 0xF0 && b <= 0xF4) { n = 4; cp = b & 0x07; }
    else return 0;
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return n;
}

/* A string at c->p (on its opening quote): the raw content span [*s, *s + *n) and whether it has escapes. */
static int string(Cur *c, const unsigned char **s, Py_ssize_t *n, int *escaped) {
    if (c->p >= c->end || *c->p != '"') BAIL;
    const unsigned char *p = ++c->p, *end = c->end;
    *escaped = 0;
    for (;;) {
        while (p + 4 <= end && !(STOP[p[0]] | STOP[p[1]] | STOP[p[2]] | STOP[p[3]])) p += 4;
        while (p < end && !STOP[*p]) p++;
        if (p >= end) BAIL;
        unsigned char ch = *p;
        if (ch == '"') break;
        if (ch < 0x20) BAIL;
        if (ch == '\\') {
            *escaped = 1;
            if (p + 1 >= end) BAIL;
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) BAIL;
                int v = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hexval(p[i]);
                    if (h < 0) BAIL;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) BAIL;   /* surrogates: leave them to the msgspec path */
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else BAIL;
            continue;
        }
        int k = utf8_len(p, end);
        if (!k) BAIL;
        p += k;
    }
    *s = c->p; *n = (Py_ssize_t)(p - c->p);
    c->p = p + 1;
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                                1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* digits[.digits] (no exponent) with at most 15 significant digits, 22 after the point: the mantissa and the
 * power of ten are exact doubles, so one IEEE division rounds correctly (Clinger's fast path), as strtod does. */
static int fast_decimal(const unsigned char *p, const unsigned char *end, int neg, double *out) {
    uint64_t m = 0;
    int digits = 0, after = 0, point = 0;
    for (; p < end; p++) {
        if (*p == '.') { point = 1; continue; }
        if (*p < '0' || *p > '9') return 0;       /* an exponent: the general path */
        if (m || *p != '0') digits++;
        if (digits > 15) return 0;
        m = m * 10 + (uint64_t)(*p - '0');
        after += point;
    }
    if (after > 22) return 0;
    double d = (double)m / POW10[after];
    *out = neg ? -d : d;
    return 1;
}

/* A number at c->p: *is_int, and with want, the value as int64 (integers) or double. Integers beyond int64 and
 * non-finite doubles bail (without want they are only checked as JSON). */
static int number_as(Cur *c, int want, int *is_int, int64_t *iv, double *dv) {
    const unsigned char *p = c->p, *end = c->end, *start = c->p;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') BAIL;
    uint64_t v = 0;
    int big = 0;   /* beyond uint64: only an integer's value needs it, and then it bails */
    if (*p == '0') {
        p++;
    } else {
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            uint64_t d = (uint64_t)(*p - '0');
            if (v > (UINT64_MAX - d) / 10) big = 1;
            v = v * 10 + d;
        }
    }
    int frac = 0;
    if (p < end && *p == '.') {
        p++; frac = 1;
        if (p >= end || *p < '0' || *p > '9') BAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++; frac = 1;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') BAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    c->p = p;
    *is_int = !frac;
    if (!want) return 0;
    if (!frac) {
        if (big) BAIL;
        if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) BAIL;
        *is_int = 1;
        *iv = neg ? (int64_t)(0 - v) : (int64_t)v;
        *dv = (double)*iv;
        return 0;
    }
    if (fast_decimal(start + neg, p, neg, dv)) { *is_int = 0; *iv = 0; return 0; }
    char buf[MAX_NUMBER + 1];
    Py_ssize_t n = (Py_ssize_t)(p - start);
    if (n > MAX_NUMBER) BAIL;
    memcpy(buf, start, (size_t)n); buf[n] = 0;
    char *stop = NULL;
    PyEval_RestoreThread(c->save);
    double d = PyOS_string_to_double(buf, &stop, NULL);
    int failed = d == -1.0 && PyErr_Occurred();
    if (failed) PyErr_Clear();
    c->save = PyEval_SaveThread();
    if (failed || stop != buf + n || !isfinite(d)) BAIL;
    *is_int = 0; *iv = 0; *dv = d;
    return 0;
}

static int number(Cur *c, int *is_int, int64_t *iv, double *dv) { return number_as(c, 1, is_int, iv, dv); }

static int literal(Cur *c, const char *word, Py_ssize_t n) {
    if (c->end - c->p < n || memcmp(c->p, word, (size_t)n) != 0) BAIL;
    c->p += n;
    return 0;
}

static int skip(Cur *c, int depth);

static int skip_container(Cur *c, int depth, int object) {
    if (depth > MAX_DEPTH) BAIL;
    unsigned char close = object ? '}' : ']';
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == close) { c->p++; return 0; }
    for (;;) {
        if (object) {
            const unsigned char *s; Py_ssize_t n; int esc;
            if (string(c, &s, &n, &esc) < 0) BAIL;
            ws(c);
            if (c->p >= c->end || *c->p != ':') BAIL;
            c->p++;
            ws(c);
        }
        if (skip(c, depth + 1) < 0) BAIL;
        ws(c);
        if (c->p >= c->end) BAIL;
        if (*c->p == ',') { c->p++; ws(c); continue; }
        if (*c->p == close) { c->p++; return 0; }
        BAIL;
    }
}

/* Any JSON value, validated and passed over. */
static int skip(Cur *c, int depth) {
    if (c->p >= c->end) BAIL;
    const unsigned char *s; Py_ssize_t n; int esc, is_int; int64_t iv; double dv;
    switch (*c->p) {
    case '"': return string(c, &s, &n, &esc);
    case '{': return skip_container(c, depth, 1);
    case '[': return skip_container(c, depth, 0);
    case 't': return literal(c, "true", 4);
    case 'f': return literal(c, "false", 5);
    case 'n': return literal(c, "null", 4);
    default: return number_as(c, 0, &is_int, &iv, &dv);
    }
}

static int intern(Cur *c, int table, const unsigned char *s, Py_ssize_t n, int32_t *out) {
    int32_t id = table_id(&c->sc->tables[table], (const char *)s, n);
    if (id < 0) { c->oom = 1; BAIL; }
    *out = id;
    return 0;
}

static int int_value(Cur *c, int64_t *out) {
    int is_int; double dv;
    if (number(c, &is_int, out, &dv) < 0 || !is_int) BAIL;
    return 0;
}

static int float_value(Cur *c, double *out) {
    int is_int; int64_t iv;
    return number(c, &is_int, &iv, out);
}

/* A kernel's grid or block: null (absent) or a list of non-negative ints whose product stays below 2**53. */
static int dims_product(Cur *c, int64_t *out) {
    if (c->p < c->end && *c->p == 'n') { *out = -1; return literal(c, "null", 4); }
    if (c->p >= c->end || *c->p != '[') BAIL;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == ']') { c->p++; *out = -1; return 0; }
    int64_t prod = 1;
    for (;;) {
        int64_t v;
        if (int_value(c, &v) < 0 || v < 0) BAIL;
        if (v && prod > ((int64_t)1 << 53) / v) BAIL;
        prod *= v;
        ws(c);
        if (c->p >= c->end) BAIL;
        if (*c->p == ',') { c->p++; ws(c); continue; }
        if (*c->p == ']') { c->p++; break; }
        BAIL;
    }
    *out = prod;
    return 0;
}

/* A raw value (any JSON) interned by its exact text, as msgspec.Raw keeps it. */
static int raw_value(Cur *c, int table, int32_t *out) {
    const unsigned char *start = c->p;
    if (skip(c, 1) < 0) BAIL;
    return intern(c, table, start, (Py_ssize_t)(c->p - start), out);
}

/* An object's next key (unescaped, or bail) and the colon after it; c->p is left on the value. */
static int member_key(Cur *c, const unsigned char **k, Py_ssize_t *n) {
    int esc;
    if (string(c, k, n, &esc) < 0 || esc) BAIL;
    ws(c);
    if (c->p >= c->end || *c->p != ':') BAIL;
    c->p++;
    ws(c);
    if (c->p >= c->end) BAIL;
    return 0;
}

/* After a member's value: 1 if another member follows (the comma is passed), 0 at the closing brace. */
static int member_next(Cur *c) {
    ws(c);
    if (c->p >= c->end) BAIL;
    if (*c->p == ',') { c->p++; ws(c); return 1; }
    if (*c->p == '}') { c->p++; return 0; }
    BAIL;
}

#define KEY(lit) (n == (Py_ssize_t)sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)
#define ONCE(bit) do { if (seen & (1u << (bit))) BAIL; seen |= 1u << (bit); } while (0)

static int args_object(Cur *c, Row *r) {
    if (c->p >= c->end || *c->p != '{') BAIL;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    uint32_t seen = 0;
    for (;;) {
        const unsigned char *k; Py_ssize_t n;
        if (member_key(c, &k, &n) < 0) BAIL;
        unsigned char first = *c->p;
        int rc;
        if (KEY("stream")) { ONCE(0); rc = int_value(c, &r->stream); }
        else if (KEY("device")) { ONCE(1); rc = int_value(c, &r->device); }
        else if (KEY("correlation")) { ONCE(2); rc = int_value(c, &r->corr); }
        else if (KEY("External id")) { ONCE(3); rc = int_value(c, &r->ext); }
        else if (KEY("external id")) { ONCE(4); rc = int_value(c, &r->ext2021); }
        else if (KEY("bytes")) { ONCE(5); rc = float_value(c, &r->bytes); }
        else if (KEY("grid")) { ONCE(6); rc = dims_product(c, &r->grid); }
        else if (KEY("block")) { ONCE(7); rc = dims_product(c, &r->block); }
        else if (KEY("Input Dims")) { ONCE(8); rc = raw_value(c, T_DIMS, &r->dims); }
        else if (KEY("Input type")) { ONCE(9); rc = raw_value(c, T_TYPES, &r->types); }
        else if (KEY("Concrete Inputs")) { ONCE(10); rc = raw_value(c, T_CONCRETE, &r->concrete); }
        else if (KEY("Collective name")) {
            /* kineto_structs.CommArgs: Optional[str] */
            ONCE(11);
            if (first == '"') { r->coll = 1; rc = skip(c, 1); }
            else if (first == 'n') rc = literal(c, "null", 4);
            else BAIL;
        } else if (KEY("In msg nelems") || KEY("Out msg nelems") || KEY("Group size")) {
            /* Optional[Num] in CommArgs: a number, a string or null; anything else fails that decoder */
            if (first == '{' || first == '[' || first == 't' || first == 'f') BAIL;
            rc = skip(c, 1);
        } else if (KEY("dtype")) {
            if (first != '"' && first != 'n') BAIL;
            rc = skip(c, 1);
        } else if (KEY("perflab: no args")) {
            BAIL;
        } else {
            rc = skip(c, 1);
        }
        if (rc < 0) BAIL;
        int more = member_next(c);
        if (more < 0) BAIL;
        if (!more) return 0;
    }
}

static int event(Cur *c, Row *r) {
    r->ph = 8;   /* "" (absent) */
    r->coll = 0;
    r->cat = r->name = r->tidstr = r->dims = r->types = r->concrete = -1;
    r->ts = r->dur = r->bytes = NAN;
    r->tid = r->id = r->stream = r->device = r->corr = r->ext = r->ext2021 = r->grid = r->block = -1;
    if (c->p >= c->end || *c->p != '{') BAIL;
    r->start = (int64_t)(c->p - c->base);
    c->p++;
    ws(c);
    uint32_t seen = 0;
    if (c->p < c->end && *c->p == '}') { c->p++; goto done; }
    for (;;) {
        const unsigned char *k; Py_ssize_t n;
        if (member_key(c, &k, &n) < 0) BAIL;
        unsigned char first = *c->p;
        int rc;
        const unsigned char *s; Py_ssize_t sn; int sesc;
        if (KEY("ph")) {
            ONCE(0);
            rc = string(c, &s, &sn, &sesc);
            if (rc == 0) {
                if (sesc) BAIL;
                if (sn == 0) r->ph = 8;
                else if (sn == 1 && s[0] == 'X') r->ph = 0;
                else if (sn == 1 && s[0] == 's') r->ph = 1;
                else if (sn == 1 && s[0] == 'f') r->ph = 2;
                else if (sn == 1 && s[0] == 't') r->ph = 3;
                else r->ph = 9;
            }
        } else if (KEY("cat")) {
            ONCE(1);
            rc = string(c, &s, &sn, &sesc);
            if (rc == 0) rc = intern(c, T_CAT, s, sn, &r->cat);
        } else if (KEY("name")) {
            ONCE(2);
            rc = string(c, &s, &sn, &sesc);
            if (rc == 0) rc = intern(c, T_NAME, s, sn, &r->name);
        } else if (KEY("ts")) { ONCE(3); rc = float_value(c, &r->ts); }
        else if (KEY("dur")) { ONCE(4); rc = float_value(c, &r->dur); }
        else if (KEY("tid")) {
            ONCE(5);
            if (first == '"') {
                rc = string(c, &s, &sn, &sesc);
                if (rc == 0) rc = intern(c, T_TIDSTR, s, sn, &r->tidstr);
            } else rc = int_value(c, &r->tid);
        } else if (KEY("id")) { ONCE(6); rc = int_value(c, &r->id); }
        else if (KEY("args")) { ONCE(7); rc = args_object(c, r); }
        else rc = skip(c, 1);
        if (rc < 0) BAIL;
        int more = member_next(c);
        if (more < 0) BAIL;
        if (!more) break;
    }
done:
    if (r->cat < 0 && intern(c, T_CAT, (const unsigned char *)"", 0, &r->cat) < 0) BAIL;
    if (r->name < 0 && intern(c, T_NAME, (const unsigned char *)"", 0, &r->name) < 0) BAIL;
    r->end = (int64_t)(c->p - c->base);
    return 0;
}

/* ---- the Python type ----------------------------------------------------------------------------------- */
typedef struct { char *data[N_COLS]; Py_ssize_t n, cap; } Cols;

static int cols_reserve(Cols *cols) {
    if (cols->n < cols->cap) return 0;
    Py_ssize_t cap = cols->cap ? cols->cap * 2 : 4096;
    for (int i = 0; i < N_COLS; i++) {
        char *d = PyMem_RawRealloc(cols->data[i], (size_t)(cap * WIDTH[i]));
        if (!d) return -1;
        cols->data[i] = d;
    }
    cols->cap = cap;
    return 0;
}

#define PUT(col, type, v) (((type *)cols->data[col])[k] = (v))

static int push_row(Cols *cols, const Row *r) {
    if (cols_reserve(cols) < 0) return -1;
    Py_ssize_t k = cols->n++;
    PUT(C_PH, int8_t, r->ph); PUT(C_CAT, int32_t, r->cat); PUT(C_NAME, int32_t, r->name);
    PUT(C_TS, double, r->ts); PUT(C_DUR, double, r->dur); PUT(C_TID, int64_t, r->tid);
    PUT(C_TIDSTR, int32_t, r->tidstr); PUT(C_ID, int64_t, r->id); PUT(C_STREAM, int64_t, r->stream);
    PUT(C_DEVICE, int64_t, r->device); PUT(C_CORR, int64_t, r->corr); PUT(C_EXT, int64_t, r->ext);
    PUT(C_EXT2021, int64_t, r->ext2021); PUT(C_BYTES, double, r->bytes); PUT(C_GRID, int64_t, r->grid);
    PUT(C_BLOCK, int64_t, r->block); PUT(C_DIMS, int32_t, r->dims); PUT(C_TYPES, int32_t, r->types);
    PUT(C_CONCRETE, int32_t, r->concrete); PUT(C_COLL, int8_t, r->coll); PUT(C_START, int64_t, r->start);
    PUT(C_END, int64_t, r->end);
    return 0;
}

static PyObject *new_entries(Table *t) {
    PyObject *out = PyList_New(t->n - t->reported);
    if (!out) return NULL;
    for (Py_ssize_t i = t->reported; i < t->n; i++) {
        PyObject *b = PyBytes_FromStringAndSize(t->key[i], t->len[i]);
        if (!b) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i - t->reported, b);
    }
    t->reported = t->n;
    return out;
}

static PyObject *Scanner_scan(Scanner *self, PyObject *arg) {
    Py_buffer view;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this Scanner is scanning in another thread");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    self->busy = 1;
    Cols cols;
    memset(&cols, 0, sizeof(cols));
    Cur c = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len,
             (const unsigned char *)view.buf, self, 0, NULL};
    Py_ssize_t n = 0;
    int ok = 0;
    PyObject *result = NULL;
    Row r;
    c.save = PyEval_SaveThread();
    ws(&c);
    if (c.p >= c.end || *c.p != '[') goto finish;
    c.p++;
    ws(&c);
    if (c.p < c.end && *c.p == ']') { c.p++; ok = 1; goto tail; }
    for (;;) {
        if (event(&c, &r) < 0) goto finish;
        if (push_row(&cols, &r) < 0) { c.oom = 1; goto finish; }
        n++;
        ws(&c);
        if (c.p >= c.end) goto finish;
        if (*c.p == ',') { c.p++; ws(&c); continue; }
        if (*c.p == ']') { c.p++; ok = 1; break; }
        goto finish;
    }
tail:
    ws(&c);
    if (c.p != c.end) ok = 0;
finish:
    PyEval_RestoreThread(c.save);
    self->busy = 0;
    PyBuffer_Release(&view);
    if (c.oom) { PyErr_NoMemory(); goto out; }
    if (!ok) { result = Py_NewRef(Py_None); goto out; }
    {
        PyObject *columns = PyTuple_New(N_COLS), *tables = PyTuple_New(N_TABLES);
        if (!columns || !tables) { Py_XDECREF(columns); Py_XDECREF(tables); goto out; }
        for (int i = 0; i < N_COLS; i++) {
            PyObject *b = PyByteArray_FromStringAndSize(cols.data[i] ? cols.data[i] : "", cols.n * WIDTH[i]);
            if (!b) { Py_DECREF(columns); Py_DECREF(tables); goto out; }
            PyTuple_SET_ITEM(columns, i, b);
        }
        for (int i = 0; i < N_TABLES; i++) {
            PyObject *e = new_entries(&self->tables[i]);
            if (!e) { Py_DECREF(columns); Py_DECREF(tables); goto out; }
            PyTuple_SET_ITEM(tables, i, e);
        }
        result = Py_BuildValue("(nNN)", n, columns, tables);
    }
out:
    for (int i = 0; i < N_COLS; i++) PyMem_RawFree(cols.data[i]);
    return result;
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist)) return -1;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this Scanner is scanning in another thread");
        return -1;
    }
    for (int i = 0; i < N_TABLES; i++) table_free(&self->tables[i]);
    return 0;
}

static void Scanner_dealloc(Scanner *self) {
    for (int i = 0; i < N_TABLES; i++) table_free(&self->tables[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O,
     "scan(block) -> (n, columns, new table entries) or None: one JSON array of Kineto events as columns."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perflab.trace.torch_profiler._kineto_scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Interning scanner of Kineto event blocks (see kineto_native.py).",
    .tp_methods = Scanner_methods,
    .tp_init = (initproc)Scanner_init,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Scanner_dealloc,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_scan", "Kineto event blocks into columns.", -1,
                                    NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    init_stop();
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType); Py_DECREF(m); return NULL;
    }
    PyModule_AddIntConstant(m, "VERSION", 1);
    return m;
}
