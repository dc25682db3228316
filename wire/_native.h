/* The bookie's request path (_add_request.c), registered in bkledger.wire._native's module (_native.c). */

#ifndef BKLEDGER_WIRE_NATIVE_H
#define BKLEDGER_WIRE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* _add_request.c */
PyObject *bk_parse_add_request(PyObject *self, PyObject *args);
PyObject *bk_scan_add_batch(PyObject *self, PyObject *args);
PyObject *bk_add_batch_head(PyObject *self, PyObject *args);
PyObject *bk_fill_slots(PyObject *self, PyObject *args);

#endif
