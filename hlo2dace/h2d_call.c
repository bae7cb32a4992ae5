/* The call path's last step in C: a compiled program's entry point called with the data
 * pointers of its arrays, taken through the buffer protocol (NumPy arrays and jax.Arrays
 * on the CPU both export one), with the GIL released while the program runs.
 *
 *   call(entry, handle, lock, slots, constants, *buffers)
 *
 * entry, handle: addresses of the program's entry point and of its state; lock: the address
 * of the pthread mutex that XLA's FFI handler takes for that state (h2d_ffi.cc), held
 * while the program runs, or 0 where no FFI call shares the state; slots: for each
 * C argument after the state, the index of its object in `buffers` (>= 0) or, as -1 - j,
 * in `constants`. Arrays must be C-contiguous; the caller checks shapes and types. An
 * int in `buffers` is passed as it is: the value of a symbol (an int64 parameter, passed
 * in the same register or stack slot as a pointer on x86-64 and AArch64).
 * Built once per machine by hlo2dace/callpath.py; without a C compiler the same call goes
 * through ctypes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

#define MAX_POINTERS 1024
typedef void *P;

/* Entry points with more than 32 pointers are called with all MAX_POINTERS of them: the
 * arguments past a function's own are passed on the stack, where the caller removes them
 * again and the callee never looks (the System V x86-64 and AArch64 calling conventions),
 * so one call serves every count. Optimisers' steps over parameter trees return hundreds
 * of arrays. */
#define A4(i) p[i], p[i + 1], p[i + 2], p[i + 3]
#define A32(i) A4(i), A4(i + 4), A4(i + 8), A4(i + 12), A4(i + 16), A4(i + 20), A4(i + 24), A4(i + 28)
#define A256(i) A32(i), A32(i + 32), A32(i + 64), A32(i + 96), A32(i + 128), A32(i + 160), A32(i + 192), A32(i + 224)
#define T4 P, P, P, P
#define T32 T4, T4, T4, T4, T4, T4, T4, T4
#define T256 T32, T32, T32, T32, T32, T32, T32, T32
typedef void (*AllPointers)(P, T256, T256, T256, T256);

/* entry(handle, p[0], ..., p[n - 1]): one case per number of pointers */
static int call_entry(void *entry, void *handle, Py_ssize_t n, P *p) {
    switch (n) {
    case 0: ((void (*)(P))entry)(handle); return 0;
    case 1: ((void (*)(P, P))entry)(handle, p[0]); return 0;
    case 2: ((void (*)(P, P, P))entry)(handle, p[0], p[1]); return 0;
    case 3: ((void (*)(P, P, P, P))entry)(handle, p[0], p[1], p[2]); return 0;
    case 4: ((void (*)(P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3]); return 0;
    case 5: ((void (*)(P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4]); return 0;
    case 6: ((void (*)(P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5]); return 0;
    case 7: ((void (*)(P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6]); return 0;
    case 8: ((void (*)(P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]); return 0;
    case 9: ((void (*)(P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]); return 0;
    case 10: ((void (*)(P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]); return 0;
    case 11: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10]); return 0;
    case 12: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]); return 0;
    case 13: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12]); return 0;
    case 14: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13]); return 0;
    case 15: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14]); return 0;
    case 16: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]); return 0;
    case 17: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16]); return 0;
    case 18: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17]); return 0;
    case 19: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18]); return 0;
    case 20: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19]); return 0;
    case 21: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20]); return 0;
    case 22: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21]); return 0;
    case 23: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22]); return 0;
    case 24: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23]); return 0;
    case 25: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24]); return 0;
    case 26: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25]); return 0;
    case 27: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26]); return 0;
    case 28: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26], p[27]); return 0;
    case 29: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26], p[27], p[28]); return 0;
    case 30: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26], p[27], p[28], p[29]); return 0;
    case 31: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26], p[27], p[28], p[29], p[30]); return 0;
    case 32: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))entry)(handle, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24], p[25], p[26], p[27], p[28], p[29], p[30], p[31]); return 0;
    default:
        if (n > MAX_POINTERS) return -1;
        for (Py_ssize_t k = n; k < MAX_POINTERS; ++k) p[k] = NULL;
        ((AllPointers)entry)(handle, A256(0), A256(256), A256(512), A256(768));
        return 0;
    }
}

static PyObject *call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 5) {
        PyErr_SetString(PyExc_TypeError,
                        "call(entry, handle, lock, slots, constants, *buffers)");
        return NULL;
    }
    void *entry = PyLong_AsVoidPtr(args[0]);
    void *handle = PyLong_AsVoidPtr(args[1]);
    pthread_mutex_t *lock = (pthread_mutex_t *)PyLong_AsVoidPtr(args[2]);
    PyObject *slots = args[3], *constants = args[4];
    if (PyErr_Occurred() || !PyTuple_Check(slots) || !PyTuple_Check(constants)) {
        PyErr_SetString(PyExc_TypeError, "bad entry, handle, lock, slots or constants");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(slots), buffers = nargs - 5;
    if (n > MAX_POINTERS) {
        PyErr_SetString(PyExc_ValueError, "too many arguments for the C call path");
        return NULL;
    }
    Py_buffer views[MAX_POINTERS];
    P pointers[MAX_POINTERS];
    Py_ssize_t taken = 0;
    int failed = 0;
    for (; taken < n; ++taken) {
        Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, taken));
        PyObject *object;
        if (slot >= 0 && slot < buffers) {
            object = args[5 + slot];
        } else if (slot < 0 && -1 - slot < PyTuple_GET_SIZE(constants)) {
            object = PyTuple_GET_ITEM(constants, -1 - slot);
        } else {
            PyErr_SetString(PyExc_IndexError, "slot out of range");
            failed = 1;
            break;
        }
        if (PyLong_CheckExact(object)) { /* a symbol's value: a 64-bit integer argument */
            views[taken].obj = NULL;
            pointers[taken] = (P)(intptr_t)PyLong_AsSsize_t(object);
            continue;
        }
        if (PyObject_GetBuffer(object, &views[taken], PyBUF_C_CONTIGUOUS) != 0) {
            failed = 1;
            break;
        }
        pointers[taken] = views[taken].buf;
    }
    if (!failed) {
        int status;
        Py_BEGIN_ALLOW_THREADS
        if (lock != NULL) pthread_mutex_lock(lock);
        status = call_entry(entry, handle, n, pointers);
        if (lock != NULL) pthread_mutex_unlock(lock);
        Py_END_ALLOW_THREADS
        if (status != 0) {
            PyErr_SetString(PyExc_ValueError, "unsupported number of arguments");
            failed = 1;
        }
    }
    for (Py_ssize_t k = 0; k < taken; ++k)
        if (views[k].obj != NULL) PyBuffer_Release(&views[k]);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call a compiled program"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "h2d_call", NULL, -1, methods,
                                     NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_h2d_call(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "MAX_POINTERS", MAX_POINTERS) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
