/* What the two sources of bkledger.wire._native share: packed varints (_native.c), and the bookie's request
   path (_add_request.c), registered in the module by _native.c. */

#ifndef BKLEDGER_WIRE_NATIVE_H
#define BKLEDGER_WIRE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* _native.c: a C-contiguous buffer of int64s named `what` in its TypeError; -1 and the error otherwise
   (a view whose obj is NULL, so releasing it does nothing) */
int bk_int64_buffer(PyObject *obj, Py_buffer *view, const char *what);

/* _native.c: packed varints (a packed repeated integer field's body b[0:n]) */
/* how many; -1 and ValueError when the last is cut off */
Py_ssize_t bk_count_varints(const unsigned char *b, Py_ssize_t n);
/* each, cut to 64 bits and masked with `mask`, into out (room for bk_count_varints of them); -1 and ValueError
   when one is longer than ten bytes */
int bk_decode_varints(const unsigned char *b, Py_ssize_t n, uint64_t mask, uint64_t *out);

/* _add_request.c */
PyObject *bk_parse_add_request(PyObject *self, PyObject *args);
PyObject *bk_scan_add_batch(PyObject *self, PyObject *args);
PyObject *bk_add_batch_head(PyObject *self, PyObject *args);
PyObject *bk_fill_slots(PyObject *self, PyObject *args);

#endif
