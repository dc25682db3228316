/* bkledger.wire._native, the bookie's request path: an AddRequest read, a batch checked, its journal record
   framed and its entries indexed, each in one call (bookie/add_request.py, bookie/core/decisions.py,
   bookie/core/records.py and bookie/storage.py hold the Python forms, the fallback where this was not
   built; tests/unit/test_native_add_request.py holds the two to each other).

   parse_add_request(raw) -> (batches, wide)
       each AddBatch of the serialized AddRequest `raw` as (ledger_id, master_key, recovery_add, write_flags,
       high_priority, entry_ids, sizes, data_start, data_end): entry_ids and sizes native int64s in a
       bytearray (None when the batch has none), data raw[data_start:data_end] (-1, -1 when absent). Read as
       protobuf reads it (repeated integers packed or not, later scalars over earlier ones, unknown fields
       passed over); what protobuf refuses, and groups, raise ValueError. `wide`: None, or where the first
       varint wider than 64 bits is, ("AddRequest" or "AddBatch", field number).
   scan_add_batch(ledger_id, entry_ids, sizes, data) -> tuple or None
       (total, smallest, largest, lowest id, highest id, first bad, max LAC) of a batch whose ids and sizes
       are int64 arrays of the same non-zero length, in one pass: the sizes' sum, min and max, the ids'
       min and max, and when the sizes cover the data with whole headers (32 bytes), the index of the first
       entry whose header does not name (ledger_id, its id), or -1, and the largest piggy-backed LAC; -2
       and -1 when the headers were not read. None when the sum overflows (the caller decides in Python).
   add_batch_head(ledger_id, entry_ids, sizes, data_len) -> bytes
       the payload of the batch's ADD_BATCH record up to its data (which is data_len bytes): type, ledger id,
       count, the ids (int64) and the sizes (uint32), little-endian. The caller frames it: the CRC32C of
       the data is google-crc32c's, whose interleaved loop is faster than this module's.
   fill_slots(slots, base, entry_ids, sizes, start, log_id, offset) -> (end, offset) or None
       one index page's share of a record's entries, written while their ids ascend and are new (below). */

#include "_native.h"

#include <string.h>

#define MAX_VARINT_BYTES 10
#define MAX_TAG_BYTES 5
#define ENTRY_HEADER 32
#define ADD_REQUEST_BATCHES 2
enum { LEDGER_ID = 1, MASTER_KEY, RECOVERY_ADD, WRITE_FLAGS, HIGH_PRIORITY, ENTRY_IDS, SIZES, DATA };
enum { VARINT = 0, FIXED64 = 1, LENGTH_DELIMITED = 2, FIXED32 = 5 };

static const char VARINT_CUT[] = "varint cut off or longer than ten bytes";

/* The unsigned varint at *pos (cut to 64 bits, as protobuf cuts it); *pos moves past it. -1 and ValueError
   when it is cut off or longer than ten bytes. */
static int read_varint(const unsigned char *b, Py_ssize_t size, Py_ssize_t *pos, uint64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    Py_ssize_t p = *pos, end = size - p < MAX_VARINT_BYTES ? size : p + MAX_VARINT_BYTES;
    while (p < end) {
        unsigned char byte = b[p++];
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = value;
            *pos = p;
            return 0;
        }
        shift += 7;
    }
    PyErr_SetString(PyExc_ValueError, VARINT_CUT);
    return -1;
}

typedef struct {
    uint64_t number;
    int wire_type;
    uint64_t value;          /* a varint's */
    Py_ssize_t start, len;   /* a length-delimited field's body */
    int too_wide;            /* a varint of ten bytes whose last carries more than bit 63 */
} Field;

/* The field at *pos: 1 when it is one (a varint or length-delimited), 0 when it was passed over (fixed
   size), -1 and ValueError when protobuf refuses it (or it is a group). */
static int next_field(const unsigned char *b, Py_ssize_t size, Py_ssize_t *pos, Field *f) {
    Py_ssize_t start = *pos;
    uint64_t key;
    if (read_varint(b, size, pos, &key) < 0)
        return -1;
    if (*pos - start > MAX_TAG_BYTES || key > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_ValueError,
                        "field tag longer than five bytes or beyond 32 bits (field number over 2**29 - 1)");
        return -1;
    }
    f->number = key >> 3;
    f->wire_type = (int)(key & 7);
    f->too_wide = 0;
    if (f->number == 0) {
        PyErr_SetString(PyExc_ValueError, "field number 0");
        return -1;
    }
    switch (f->wire_type) {
    case VARINT:
        start = *pos;
        if (read_varint(b, size, pos, &f->value) < 0)
            return -1;
        f->too_wide = *pos - start == MAX_VARINT_BYTES && b[*pos - 1] > 1;
        return 1;
    case LENGTH_DELIMITED: {
        uint64_t length;
        if (read_varint(b, size, pos, &length) < 0)
            return -1;
        if (length > (uint64_t)(size - *pos)) {
            PyErr_Format(PyExc_ValueError, "field %llu of %llu bytes cut off at %zd", (unsigned long long)f->number,
                         (unsigned long long)length, size - *pos);
            return -1;
        }
        f->start = *pos;
        f->len = (Py_ssize_t)length;
        *pos += f->len;
        return 1;
    }
    case FIXED64:
    case FIXED32: {
        Py_ssize_t width = f->wire_type == FIXED64 ? 8 : 4;
        if (size - *pos < width) {
            PyErr_Format(PyExc_ValueError, "fixed-size field %llu cut off", (unsigned long long)f->number);
            return -1;
        }
        *pos += width;
        return 0;
    }
    default:
        PyErr_Format(PyExc_ValueError, "wire type %d of field %llu is not read here", f->wire_type,
                     (unsigned long long)f->number);
        return -1;
    }
}

/* A growing vector of int64s: an AddBatch's entry ids or sizes, from any number of pieces. */
typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
    int present;             /* the field was seen (even with no value: an empty packed run) */
} Vector;

static int reserve(Vector *vec, Py_ssize_t more) {
    vec->present = 1;
    if (vec->n + more <= vec->cap)
        return 0;
    Py_ssize_t cap = vec->cap ? vec->cap : 64;
    while (cap < vec->n + more)
        cap *= 2;
    int64_t *grown = PyMem_Realloc(vec->v, (size_t)cap * sizeof(int64_t));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    vec->v = grown;
    vec->cap = cap;
    return 0;
}

/* A packed run of varints appended to vec, each masked with `mask` (the low 32 bits of a size). */
static int append_packed(Vector *vec, const unsigned char *b, Py_ssize_t n, uint64_t mask) {
    Py_ssize_t count = bk_count_varints(b, n);
    if (count < 0 || reserve(vec, count) < 0 || bk_decode_varints(b, n, mask, (uint64_t *)(vec->v + vec->n)) < 0)
        return -1;
    vec->n += count;
    return 0;
}

static int append_one(Vector *vec, uint64_t value) {
    if (reserve(vec, 1) < 0)
        return -1;
    vec->v[vec->n++] = (int64_t)value;
    return 0;
}

static PyObject *as_bytearray(const Vector *vec) {
    if (!vec->present)
        Py_RETURN_NONE;
    return PyByteArray_FromStringAndSize((const char *)vec->v, vec->n * (Py_ssize_t)sizeof(int64_t));
}

typedef struct {
    const char *message;     /* NULL: none found */
    uint64_t number;
} Wide;

static void note_wide(Wide *wide, const Field *f, const char *message) {
    if (f->too_wide && wide->message == NULL) {
        wide->message = message;
        wide->number = f->number;
    }
}

/* One AddBatch, the body raw[base:base + size], as parse_add_request's tuple. */
static PyObject *parse_batch(const unsigned char *raw, Py_ssize_t base, Py_ssize_t size, Wide *wide) {
    const unsigned char *b = raw + base;
    int64_t ledger_id = 0;
    int32_t write_flags = 0;
    int recovery_add = 0, high_priority = 0;
    Py_ssize_t key_start = 0, key_len = 0, data_start = -1, data_end = -1;
    Vector ids = {0}, sizes = {0};
    PyObject *out = NULL;
    Py_ssize_t pos = 0;
    while (pos < size) {
        Field f;
        int got = next_field(b, size, &pos, &f);
        if (got < 0)
            goto done;
        if (got == 0)
            continue;
        note_wide(wide, &f, "AddBatch");
        if (f.wire_type == VARINT) {
            int failed = 0;
            switch (f.number) {
            case LEDGER_ID: ledger_id = (int64_t)f.value; break;
            case RECOVERY_ADD: recovery_add = f.value != 0; break;
            case WRITE_FLAGS: write_flags = (int32_t)(uint32_t)f.value; break;
            case HIGH_PRIORITY: high_priority = f.value != 0; break;
            case ENTRY_IDS: failed = append_one(&ids, f.value); break;
            case SIZES: failed = append_one(&sizes, f.value & 0xFFFFFFFFu); break;
            default: break;
            }
            if (failed < 0)
                goto done;
        } else if (f.number == ENTRY_IDS || f.number == SIZES) {
            int is_ids = f.number == ENTRY_IDS;
            if (append_packed(is_ids ? &ids : &sizes, b + f.start, f.len, is_ids ? UINT64_MAX : 0xFFFFFFFFu) < 0)
                goto done;
        } else if (f.number == MASTER_KEY) {
            key_start = f.start;
            key_len = f.len;
        } else if (f.number == DATA) {
            data_start = base + f.start;
            data_end = data_start + f.len;
        }
    }
    out = Py_BuildValue("(Ly#NiNNNnn)", (long long)ledger_id, (const char *)b + key_start, key_len,
                        PyBool_FromLong(recovery_add), (int)write_flags, PyBool_FromLong(high_priority),
                        as_bytearray(&ids), as_bytearray(&sizes), data_start, data_end);
done:
    PyMem_Free(ids.v);
    PyMem_Free(sizes.v);
    return out;
}

PyObject *bk_parse_add_request(PyObject *self, PyObject *args) {
    Py_buffer raw = {0};
    if (!PyArg_ParseTuple(args, "y*", &raw))
        return NULL;
    const unsigned char *b = (const unsigned char *)raw.buf;
    Wide wide = {NULL, 0};
    PyObject *batches = PyList_New(0), *out = NULL;
    if (batches == NULL)
        goto done;
    Py_ssize_t pos = 0;
    while (pos < raw.len) {
        Field f;
        int got = next_field(b, raw.len, &pos, &f);
        if (got < 0)
            goto done;
        if (got == 0)
            continue;
        note_wide(&wide, &f, "AddRequest");
        if (f.number == ADD_REQUEST_BATCHES && f.wire_type == LENGTH_DELIMITED) {
            PyObject *batch = parse_batch(b, f.start, f.len, &wide);
            if (batch == NULL)
                goto done;
            int appended = PyList_Append(batches, batch);
            Py_DECREF(batch);
            if (appended < 0)
                goto done;
        }
    }
    if (wide.message == NULL)
        out = Py_BuildValue("(OO)", batches, Py_None);
    else
        out = Py_BuildValue("(O(sK))", batches, wide.message, (unsigned long long)wide.number);
done:
    Py_XDECREF(batches);
    PyBuffer_Release(&raw);
    return out;
}

static int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

PyObject *bk_scan_add_batch(PyObject *self, PyObject *args) {
    long long ledger_id;
    PyObject *ids_obj, *sizes_obj, *out = NULL;
    Py_buffer ids = {0}, sizes = {0}, data = {0};
    if (!PyArg_ParseTuple(args, "LOOy*", &ledger_id, &ids_obj, &sizes_obj, &data))
        return NULL;
    if (bk_int64_buffer(ids_obj, &ids, "entry_ids") < 0 || bk_int64_buffer(sizes_obj, &sizes, "sizes") < 0)
        goto done;
    Py_ssize_t n = ids.len / 8;
    if (n == 0 || sizes.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "entry ids and sizes must be non-empty and of the same length");
        goto done;
    }
    const int64_t *id = (const int64_t *)ids.buf, *size = (const int64_t *)sizes.buf;
    int64_t total = 0, smallest = size[0], largest = size[0], lowest = id[0], highest = id[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (__builtin_add_overflow(total, size[i], &total)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        smallest = size[i] < smallest ? size[i] : smallest;
        largest = size[i] > largest ? size[i] : largest;
        lowest = id[i] < lowest ? id[i] : lowest;
        highest = id[i] > highest ? id[i] : highest;
    }
    Py_ssize_t bad = -2;
    int64_t max_lac = -1;
    if (total == data.len && smallest >= ENTRY_HEADER) {
        const unsigned char *p = (const unsigned char *)data.buf;
        bad = -1;
        for (Py_ssize_t i = 0; i < n; p += size[i], i++) {
            if (be64(p) != ledger_id || be64(p + 8) != id[i]) {
                bad = i;
                max_lac = -1;
                break;
            }
            int64_t lac = be64(p + 16);
            max_lac = lac > max_lac ? lac : max_lac;
        }
    }
    out = Py_BuildValue("(LLLLLnL)", (long long)total, (long long)smallest, (long long)largest, (long long)lowest,
                        (long long)highest, bad, (long long)max_lac);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&data);
    return out;
}

static void put_le(unsigned char *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++, v >>= 8)
        out[i] = (unsigned char)(v & 0xFF);
}

#define BATCH_HEAD 13        /* type (1), ledger id (8), count (4) */
#define ADD_BATCH 1

PyObject *bk_add_batch_head(PyObject *self, PyObject *args) {
    long long ledger_id;
    Py_ssize_t data_len;
    PyObject *ids_obj, *sizes_obj, *out = NULL;
    Py_buffer ids = {0}, sizes = {0};
    if (!PyArg_ParseTuple(args, "LOOn", &ledger_id, &ids_obj, &sizes_obj, &data_len))
        return NULL;
    if (bk_int64_buffer(ids_obj, &ids, "entry_ids") < 0 || bk_int64_buffer(sizes_obj, &sizes, "sizes") < 0)
        goto done;
    Py_ssize_t n = ids.len / 8;
    if (sizes.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "entry_ids and sizes must be vectors of the same length");
        goto done;
    }
    const int64_t *id = (const int64_t *)ids.buf, *size = (const int64_t *)sizes.buf;
    long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total += (uint32_t)size[i];          /* a size is recorded as its low 32 bits */
    if (total != data_len) {
        PyErr_Format(PyExc_ValueError, "sizes add up to %lld, data has %zd bytes", total, data_len);
        goto done;
    }
    if ((uint64_t)n > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_ValueError, "an ADD_BATCH record holds fewer than 2**32 entries");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, BATCH_HEAD + 12 * n);
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    w[0] = ADD_BATCH;
    put_le(w + 1, (uint64_t)ledger_id, 8);
    put_le(w + 9, (uint64_t)n, 4);
    unsigned char *at = w + BATCH_HEAD;
    for (Py_ssize_t i = 0; i < n; i++, at += 8)
        put_le(at, (uint64_t)id[i], 8);
    for (Py_ssize_t i = 0; i < n; i++, at += 4)
        put_le(at, (uint32_t)size[i], 4);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&sizes);
    return out;
}

/* fill_slots(slots, base, entry_ids, sizes, start, log_id, offset) -> (end, offset) or None
   The index update of an ADD_BATCH record's entries from `start` on that fall in one index page: `slots`
   is the page (a writable (n, 3) int64 array of (entry log id, offset, size) for entries base .. base +
   n - 1), the entry at `start` is at `offset` in entry log `log_id`, each next one right after it. Writes
   the entries start .. end - 1 (those whose ids are in the page) and returns where it stopped and the
   offset there; writes nothing and returns None when their ids are not strictly ascending or a slot
   among them already names an entry (the caller then keeps the per-log usage right in Python). */
PyObject *bk_fill_slots(PyObject *self, PyObject *args) {
    PyObject *slots_obj, *ids_obj, *sizes_obj, *out = NULL;
    long long base, log_id, offset;
    Py_ssize_t start;
    Py_buffer page = {0}, ids = {0}, sizes = {0};
    if (!PyArg_ParseTuple(args, "OLOOnLL", &slots_obj, &base, &ids_obj, &sizes_obj, &start, &log_id, &offset))
        return NULL;
    if (PyObject_GetBuffer(slots_obj, &page, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        page.obj = NULL;
        goto done;
    }
    if (page.itemsize != 8 || page.len % 24 != 0) {
        PyErr_SetString(PyExc_TypeError, "slots must be a contiguous (n, 3) int64 array");
        goto done;
    }
    if (bk_int64_buffer(ids_obj, &ids, "entry_ids") < 0 || bk_int64_buffer(sizes_obj, &sizes, "sizes") < 0)
        goto done;
    Py_ssize_t n = ids.len / 8, rows = page.len / 24;
    if (sizes.len / 8 != n || start < 0 || start >= n) {
        PyErr_SetString(PyExc_ValueError, "entry ids and sizes must be of the same length, start within them");
        goto done;
    }
    const int64_t *id = (const int64_t *)ids.buf, *size = (const int64_t *)sizes.buf;
    int64_t *slot = (int64_t *)page.buf;
    Py_ssize_t end = start;
    while (end < n && id[end] >= base && id[end] - base < rows) {
        if ((end > start && id[end] <= id[end - 1]) || slot[3 * (id[end] - base)] != 0) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        end++;
    }
    if (end == start) {
        PyErr_SetString(PyExc_ValueError, "the entry at start is not in the page");
        goto done;
    }
    for (Py_ssize_t i = start; i < end; i++) {
        int64_t *s = slot + 3 * (id[i] - base);
        s[0] = log_id;
        s[1] = offset;
        s[2] = size[i];
        offset += size[i];
    }
    out = Py_BuildValue("(nL)", end, offset);
done:
    PyBuffer_Release(&page);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&sizes);
    return out;
}
