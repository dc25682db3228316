/* bkledger.wire._native: CRC32C over many packaged entries in one call, and packed varints (the bookie's
   request path, in the same module, is _add_request.c).

   A packaged entry is a 32-byte header (ledger id, entry id, LAC, length; big-endian int64s), its
   digest, then its payload; the CRC32C digest is the checksum of header then payload (BookKeeper's
   CRC32C DigestManager). Packaging and verifying a bulk of entries one Python call per entry cost
   about a fifth of a Spark task's CPU; here a whole bulk is one call.

   package_crc32c(data, offsets, ledger_id, first_entry_id, lac, start_length) -> bytes
       entries data[offsets[i]:offsets[i + 1]] packaged back to back as ids first_entry_id + i.
   crc32c_entries(data, starts, ends, header_length, digest_length) -> bytes
       the CRC32C of data[s:s + header_length] + data[s + header_length + digest_length:e] for each
       (s, e), as native-endian uint32s.
   gather(data, offsets, keep) -> bytes
       the entries data[offsets[i]:offsets[i + 1]] whose keep[i] (one byte each) is set, back to back:
       a striped write set's entries for one bookie, or the residues a striped reader asked a bookie for.

   verify_crc32c(data, starts, ends, ledger_ids, entry_ids) -> bytes
       one byte per packaged entry data[starts[i]:ends[i]]: 1 if its header names ledger ledger_ids[i]
       (or ledger_ids[0] for all, given one) and entry entry_ids[i] and its CRC32C digest matches, else 0
       (a reader's whole check of a received batch, without an index array per header field).
   pack_ranges(buffers, which, starts, ends) -> (bytes, bytearray)
       the ranges buffers[which[i]][starts[i]:ends[i]] back to back, and their n + 1 offsets from 0 as
       native int64s: a column of payloads for Arrow in one copy per range.

   pack_varints(values) -> bytes
       the protobuf varints of int64 values back to back (a packed repeated field's body; a negative value
       takes ten bytes, as protobuf writes it): an AddRequest's entry ids and sizes, a range read's.

   The checksum uses the SSE4.2 crc32 instruction where the CPU has it, a table otherwise.

   A call over fewer than GIL_RELEASE_BYTES keeps the GIL: giving it up and taking it back costs a thread
   switch whenever another thread wants it (a producer thread adding entries, a reader), tens of
   microseconds and up to the interpreter's switch interval, more than the work itself. A client
   packaging 27 single adds (12 us of work) spent 80 us per call in a profile at 17,000 adds/s. Above
   64 KiB a reader's verification gains more from the client loop receiving meanwhile (bookie_read
   --quick, alternating: 1 KiB entries 215-281 MB/s keeping the GIL up to 1 MiB, 252-272 releasing it). */

#include "_native.h"

#include <string.h>

#define HEADER_LENGTH 32
#define CRC_LENGTH 4
#define POLY 0x82F63B78u /* CRC32C (Castagnoli), reflected */
#define GIL_RELEASE_BYTES (64 * 1024)
/* Py_BEGIN/END_ALLOW_THREADS, only for work on `nbytes` of GIL_RELEASE_BYTES or more. */
#define BEGIN_ALLOW_THREADS_OVER(nbytes) { \
    PyThreadState *_gil_save = (Py_ssize_t)(nbytes) >= GIL_RELEASE_BYTES ? PyEval_SaveThread() : NULL;
#define END_ALLOW_THREADS_OVER if (_gil_save != NULL) PyEval_RestoreThread(_gil_save); }

static uint32_t table[256];

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
}

static uint32_t extend_table(uint32_t crc, const unsigned char *p, size_t n) {
    while (n--)
        crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
__attribute__((target("sse4.2")))
static uint32_t extend_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

/* crc is the running register (not inverted at the ends): callers invert once per checksum */
static uint32_t (*extend)(uint32_t, const unsigned char *, size_t) = extend_table;

static uint32_t checksum(const unsigned char *a, size_t na, const unsigned char *b, size_t nb) {
    return ~extend(extend(0xFFFFFFFFu, a, na), b, nb);
}

/* The digest of a packaged entry of `size` bytes at p: its header, then its payload after the digest. */
static uint32_t entry_checksum(const unsigned char *p, size_t size, size_t header_length, size_t digest_length) {
    size_t skip = header_length + digest_length;
    return checksum(p, header_length, p + skip, size - skip);
}

static void put_be64(unsigned char *out, int64_t value) {
    uint64_t v = (uint64_t)value;
    for (int i = 7; i >= 0; i--) {
        out[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

static void put_be32(unsigned char *out, uint32_t v) {
    for (int i = 3; i >= 0; i--) {
        out[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* A C-contiguous buffer of int64s, or an error. Each call below starts its buffers zeroed and releases
   them all at its one exit: releasing a buffer that was never filled (obj NULL) does nothing. */
int bk_int64_buffer(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        view->obj = NULL;
        return -1;
    }
    if (view->itemsize != 8 || view->format == NULL || strchr("qlQL", view->format[strlen(view->format) - 1]) == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Checks offsets[0..n] (n + 1 of them) lie inside a buffer of `len` bytes and do not decrease. */
static int check_offsets(const int64_t *off, Py_ssize_t n, Py_ssize_t len) {
    if (n < 0 || off[0] < 0 || off[n] > len) {
        PyErr_SetString(PyExc_ValueError, "offsets must lie inside data");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i + 1] < off[i]) {
            PyErr_SetString(PyExc_ValueError, "offsets must not decrease");
            return -1;
        }
    }
    return 0;
}

/* Checks each packaged entry data[s[i]:e[i]] lies inside a buffer of `len` bytes and holds at least
   `overhead` bytes (its header and digest). */
static int check_entries(const int64_t *s, const int64_t *e, Py_ssize_t n, Py_ssize_t len, Py_ssize_t overhead) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || s[i] + overhead > e[i] || e[i] > len) {
            PyErr_Format(PyExc_ValueError, "entry %zd (%lld..%lld) does not hold a header and digest inside data",
                         i, (long long)s[i], (long long)e[i]);
            return -1;
        }
    }
    return 0;
}

static PyObject *package_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data = {0}, offsets = {0};
    long long ledger_id, first_entry_id, lac, length;
    PyObject *offsets_obj, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*OLLLL", &data, &offsets_obj, &ledger_id, &first_entry_id, &lac, &length)
        || bk_int64_buffer(offsets_obj, &offsets, "offsets") < 0)
        goto done;
    const int64_t *off = (const int64_t *)offsets.buf;
    Py_ssize_t n = offsets.len / 8 - 1;
    if (check_offsets(off, n, data.len) < 0)
        goto done;
    out = PyBytes_FromStringAndSize(NULL, (off[n] - off[0]) + n * (HEADER_LENGTH + CRC_LENGTH));
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *src = (const unsigned char *)data.buf;
    BEGIN_ALLOW_THREADS_OVER(data.len)
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t size = (size_t)(off[i + 1] - off[i]);
        length += (long long)size;
        put_be64(w, ledger_id);
        put_be64(w + 8, first_entry_id + i);
        put_be64(w + 16, lac);
        put_be64(w + 24, length);
        memcpy(w + HEADER_LENGTH + CRC_LENGTH, src + off[i], size);
        put_be32(w + HEADER_LENGTH, checksum(w, HEADER_LENGTH, w + HEADER_LENGTH + CRC_LENGTH, size));
        w += HEADER_LENGTH + CRC_LENGTH + size;
    }
    END_ALLOW_THREADS_OVER
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    return out;
}

static PyObject *crc32c_entries(PyObject *self, PyObject *args) {
    Py_buffer data = {0}, starts = {0}, ends = {0};
    PyObject *starts_obj, *ends_obj, *out = NULL;
    Py_ssize_t header_length, digest_length;
    if (!PyArg_ParseTuple(args, "y*OOnn", &data, &starts_obj, &ends_obj, &header_length, &digest_length)
        || bk_int64_buffer(starts_obj, &starts, "starts") < 0 || bk_int64_buffer(ends_obj, &ends, "ends") < 0)
        goto done;
    Py_ssize_t n = starts.len / 8;
    const int64_t *s = (const int64_t *)starts.buf, *e = (const int64_t *)ends.buf;
    if (ends.len != starts.len || header_length < 0 || digest_length < 0) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must have one length; lengths must not be negative");
        goto done;
    }
    if (check_entries(s, e, n, data.len, header_length + digest_length) < 0)
        goto done;
    out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL)
        goto done;
    uint32_t *crc = (uint32_t *)PyBytes_AS_STRING(out);
    const unsigned char *d = (const unsigned char *)data.buf;
    BEGIN_ALLOW_THREADS_OVER(data.len)
    for (Py_ssize_t i = 0; i < n; i++)
        crc[i] = entry_checksum(d + s[i], (size_t)(e[i] - s[i]), (size_t)header_length, (size_t)digest_length);
    END_ALLOW_THREADS_OVER
done:
    PyBuffer_Release(&ends);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&data);
    return out;
}

static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer data = {0}, offsets = {0}, keep = {0};
    PyObject *offsets_obj, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*Oy*", &data, &offsets_obj, &keep)
        || bk_int64_buffer(offsets_obj, &offsets, "offsets") < 0)
        goto done;
    const int64_t *off = (const int64_t *)offsets.buf;
    const unsigned char *k = (const unsigned char *)keep.buf;
    Py_ssize_t n = offsets.len / 8 - 1;
    if (check_offsets(off, n, data.len) < 0)
        goto done;
    if (keep.len != n) {
        PyErr_Format(PyExc_ValueError, "keep has %zd flags for %zd entries", keep.len, n);
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (k[i])
            total += off[i + 1] - off[i];
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *src = (const unsigned char *)data.buf;
    BEGIN_ALLOW_THREADS_OVER(total)
    Py_ssize_t i = 0;
    while (i < n) {
        if (!k[i]) {
            i++;
            continue;
        }
        Py_ssize_t j = i + 1;           /* a run of kept entries is one copy */
        while (j < n && k[j])
            j++;
        memcpy(w, src + off[i], (size_t)(off[j] - off[i]));
        w += off[j] - off[i];
        i = j;
    }
    END_ALLOW_THREADS_OVER
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&keep);
    PyBuffer_Release(&data);
    return out;
}

static int64_t get_be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static uint32_t get_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static PyObject *verify_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data = {0}, starts = {0}, ends = {0}, ledgers = {0}, entries = {0};
    PyObject *starts_obj, *ends_obj, *ledgers_obj, *entries_obj, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*OOOO", &data, &starts_obj, &ends_obj, &ledgers_obj, &entries_obj)
        || bk_int64_buffer(starts_obj, &starts, "starts") < 0 || bk_int64_buffer(ends_obj, &ends, "ends") < 0
        || bk_int64_buffer(ledgers_obj, &ledgers, "ledger_ids") < 0 || bk_int64_buffer(entries_obj, &entries, "entry_ids") < 0)
        goto done;
    Py_ssize_t n = starts.len / 8, nl = ledgers.len / 8;
    const int64_t *s = (const int64_t *)starts.buf, *e = (const int64_t *)ends.buf;
    const int64_t *lid = (const int64_t *)ledgers.buf, *eid = (const int64_t *)entries.buf;
    if (ends.len != starts.len || entries.len != starts.len || (nl != n && nl != 1)) {
        PyErr_SetString(PyExc_ValueError, "starts, ends and entry_ids must have one length; ledger_ids that "
                                          "length or one");
        goto done;
    }
    if (check_entries(s, e, n, data.len, HEADER_LENGTH + CRC_LENGTH) < 0)
        goto done;
    out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        goto done;
    unsigned char *ok = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *d = (const unsigned char *)data.buf;
    BEGIN_ALLOW_THREADS_OVER(data.len)
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *p = d + s[i];
        ok[i] = get_be64(p) == lid[nl == 1 ? 0 : i] && get_be64(p + 8) == eid[i]
                && entry_checksum(p, (size_t)(e[i] - s[i]), HEADER_LENGTH, CRC_LENGTH) == get_be32(p + HEADER_LENGTH);
    }
    END_ALLOW_THREADS_OVER
done:
    PyBuffer_Release(&entries);
    PyBuffer_Release(&ledgers);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&data);
    return out;
}

static PyObject *pack_ranges(PyObject *self, PyObject *args) {
    Py_buffer which = {0}, starts = {0}, ends = {0};
    PyObject *buffers_obj, *which_obj, *starts_obj, *ends_obj, *seq = NULL, *data = NULL, *offsets = NULL;
    PyObject *out = NULL;
    Py_buffer *bufs = NULL;
    Py_ssize_t k = 0, got = 0;
    if (!PyArg_ParseTuple(args, "OOOO", &buffers_obj, &which_obj, &starts_obj, &ends_obj)
        || bk_int64_buffer(which_obj, &which, "which") < 0 || bk_int64_buffer(starts_obj, &starts, "starts") < 0
        || bk_int64_buffer(ends_obj, &ends, "ends") < 0)
        goto done;
    seq = PySequence_Fast(buffers_obj, "buffers must be a sequence");
    if (seq == NULL)
        goto done;
    k = PySequence_Fast_GET_SIZE(seq);
    bufs = PyMem_Calloc(k ? (size_t)k : 1, sizeof(Py_buffer));
    if (bufs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < k; got++)
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &bufs[got], PyBUF_SIMPLE) < 0)
            goto done;
    Py_ssize_t n = starts.len / 8;
    const int64_t *w = (const int64_t *)which.buf, *s = (const int64_t *)starts.buf, *e = (const int64_t *)ends.buf;
    if (ends.len != starts.len || (which.len != starts.len && !(which.len == 0 && k == 1))) {
        PyErr_SetString(PyExc_ValueError, "starts, ends and which must have one length (which may be empty "
                                          "with one buffer)");
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t b = which.len ? w[i] : 0;
        if (b < 0 || b >= k || s[i] < 0 || e[i] < s[i] || e[i] > bufs[b].len) {
            PyErr_Format(PyExc_ValueError, "range %zd (buffer %lld, %lld..%lld) does not lie inside its buffer",
                         i, (long long)b, (long long)s[i], (long long)e[i]);
            goto done;
        }
        total += (Py_ssize_t)(e[i] - s[i]);
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    offsets = PyByteArray_FromStringAndSize(NULL, (n + 1) * 8);
    if (data == NULL || offsets == NULL)
        goto done;
    unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(data);
    int64_t *off = (int64_t *)PyByteArray_AS_STRING(offsets);
    BEGIN_ALLOW_THREADS_OVER(total)
    int64_t at = 0;
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *src = (const unsigned char *)bufs[which.len ? w[i] : 0].buf;
        memcpy(dst + at, src + s[i], (size_t)(e[i] - s[i]));
        at += e[i] - s[i];
        off[i + 1] = at;
    }
    END_ALLOW_THREADS_OVER
    out = PyTuple_Pack(2, data, offsets);
done:
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    Py_XDECREF(seq);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&which);
    return out;
}

static PyObject *pack_varints(PyObject *self, PyObject *args) {
    Py_buffer values = {0};
    PyObject *values_obj, *out = NULL;
    if (!PyArg_ParseTuple(args, "O", &values_obj) || bk_int64_buffer(values_obj, &values, "values") < 0)
        goto done;
    const uint64_t *v = (const uint64_t *)values.buf;
    Py_ssize_t n = values.len / 8, total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t x = v[i];
        total++;
        while (x >= 0x80) {
            x >>= 7;
            total++;
        }
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t x = v[i];
        while (x >= 0x80) {
            *w++ = (unsigned char)(x | 0x80);
            x >>= 7;
        }
        *w++ = (unsigned char)x;
    }
done:
    PyBuffer_Release(&values);
    return out;
}

Py_ssize_t bk_count_varints(const unsigned char *b, Py_ssize_t n) {
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        count += b[i] < 0x80;
    if (n && b[n - 1] >= 0x80) {
        PyErr_SetString(PyExc_ValueError, "packed varints end inside a varint");
        return -1;
    }
    return count;
}

int bk_decode_varints(const unsigned char *b, Py_ssize_t n, uint64_t mask, uint64_t *out) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint64_t value = 0;
        int width = 0;
        unsigned char byte;
        do {
            byte = b[i++];
            if (width < 10)
                value |= (uint64_t)(byte & 0x7F) << (7 * width);
            width++;
        } while (byte >= 0x80);
        if (width > 10) {
            PyErr_SetString(PyExc_ValueError, "a packed varint is longer than ten bytes");
            return -1;
        }
        *out++ = value & mask;
    }
    return 0;
}

static PyObject *unpack_varints(PyObject *self, PyObject *args) {
    Py_buffer body = {0};
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "y*", &body))
        return NULL;
    const unsigned char *b = (const unsigned char *)body.buf;
    Py_ssize_t count = bk_count_varints(b, body.len);
    if (count < 0)
        goto done;
    out = PyByteArray_FromStringAndSize(NULL, count * 8);
    if (out != NULL && bk_decode_varints(b, body.len, UINT64_MAX, (uint64_t *)PyByteArray_AS_STRING(out)) < 0)
        Py_CLEAR(out);
done:
    PyBuffer_Release(&body);
    return out;
}

static PyObject *implementation(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(extend == extend_table ? "table" : "sse4.2");
}

static int has_sse42(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
#else
    return 0;
#endif
}

static PyObject *use_implementation(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    if (strcmp(name, "table") == 0) {
        extend = extend_table;
        Py_RETURN_NONE;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (strcmp(name, "sse4.2") == 0 && has_sse42()) {
        extend = extend_sse42;
        Py_RETURN_NONE;
    }
#endif
    PyErr_Format(PyExc_ValueError, "no CRC32C implementation %s on this machine (there is 'table')", name);
    return NULL;
}

static PyMethodDef methods[] = {
    {"package_crc32c", package_crc32c, METH_VARARGS, "Package entries with CRC32C digests, back to back."},
    {"crc32c_entries", crc32c_entries, METH_VARARGS, "CRC32C of header + payload of each packaged entry."},
    {"gather", gather, METH_VARARGS, "The kept entries of back-to-back entries, back to back."},
    {"verify_crc32c", verify_crc32c, METH_VARARGS, "Whether each packaged entry names its ledger and entry and its CRC32C matches."},
    {"pack_ranges", pack_ranges, METH_VARARGS, "Ranges of several buffers back to back, and their offsets."},
    {"pack_varints", pack_varints, METH_VARARGS, "Protobuf varints of int64 values, back to back."},
    {"unpack_varints", unpack_varints, METH_VARARGS, "Back-to-back protobuf varints as uint64 (a bytearray)."},
    {"parse_add_request", bk_parse_add_request, METH_VARARGS, "An AddRequest's batches as tuples, and its first varint wider than 64 bits."},
    {"scan_add_batch", bk_scan_add_batch, METH_VARARGS, "A batch's size and id bounds, its first bad header and its largest LAC."},
    {"add_batch_head", bk_add_batch_head, METH_VARARGS, "An ADD_BATCH record's payload up to its data."},
    {"fill_slots", bk_fill_slots, METH_VARARGS, "An index page's slots of a record's entries, while they are new and ascending."},
    {"implementation", implementation, METH_NOARGS, "'sse4.2' or 'table': how the checksum is computed."},
    {"use_implementation", use_implementation, METH_VARARGS, "Compute with 'table' or 'sse4.2' (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    make_table();
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_sse42())
        extend = extend_sse42;
#endif
    return PyModule_Create(&module);
}
