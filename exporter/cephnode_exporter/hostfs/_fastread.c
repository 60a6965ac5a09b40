/*
 * Batched reads of kept-open sysfs attribute files: the scrape's hot loops in C.
 *
 * A 96-CPU node has 1,728 cpuidle counter files (Documentation/ABI/testing/
 * sysfs-devices-system-cpu, printed by drivers/cpuidle/sysfs.c with "%llu\n"); read from
 * Python, each costs a call, a bytes object and an int() on top of its pread(2). Here one
 * call preads a whole list of descriptors with the GIL released and parses the values.
 *
 * The contract, shared with the pure-Python fallback in batch.py: an entry is None
 * whenever this code is not sure of the value (the read failed, the text is not a plain
 * decimal integer, it does not fit in 64 bits); the caller then reads that file the
 * ordinary way, which names the error. So nothing is accepted here that Python's int()
 * would refuse, and nothing is reported wrongly: the worst case is a slower read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A read longer than this is refused: the callers read a few bytes (64 for a counter). */
#define MAX_SIZE 4096

/* What one pread gave: its length (-1 when it failed) and where its bytes start in the
 * shared buffer. The texts are packed one after another, so a batch of page-sized reads
 * of short attributes touches a few pages of the buffer, not one page each. */
typedef struct {
    ssize_t len;
    size_t off;
} result_t;

/* The descriptors of a sequence of ints, or -1 (with an exception set) on a bad argument. */
static Py_ssize_t collect_fds(PyObject *seq, int **out)
{
    PyObject *fast = PySequence_Fast(seq, "fds must be a sequence of ints");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int *fds = PyMem_Malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (fds == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(items[i]);
        if (fd == -1 && PyErr_Occurred()) {
            PyMem_Free(fds);
            Py_DECREF(fast);
            return -1;
        }
        if (fd < -1 || fd > INT32_MAX) {
            PyMem_Free(fds);
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "descriptor out of range");
            return -1;
        }
        fds[i] = (int)fd; /* -1: no descriptor, its entry is None */
    }
    Py_DECREF(fast);
    *out = fds;
    return n;
}

/* pread(2) of every descriptor at offset 0, packed into buf, without the GIL. Each
 * read goes through a buffer of known size, so that _FORTIFY_SOURCE checks it
 * (__pread_chk; Debian builds with it, lintian hardening-no-fortify-functions). With
 * recheck, a descriptor whose file was unlinked (st_nlink 0: a file replaced in a copied
 * tree) or whose fstat fails is not read: the caller's plain read reopens the path. */
static void read_all(const int *fds, Py_ssize_t n, char *buf, Py_ssize_t size, result_t *res,
                     int recheck)
{
    char one[MAX_SIZE];
    size_t pos = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        ssize_t got = -1;
        struct stat st;
        if (fds[i] < 0 || (recheck && (fstat(fds[i], &st) != 0 || st.st_nlink == 0))) {
            res[i].len = -1;
            continue;
        }
        do {
            got = pread(fds[i], one, (size_t)size, 0);
        } while (got < 0 && errno == EINTR);
        res[i].off = pos;
        if (got > 0) {
            memcpy(buf + pos, one, (size_t)got);
            pos += (size_t)got;
        }
        res[i].len = got;
    }
    Py_END_ALLOW_THREADS
}

/* ASCII whitespace as Python's int() strips it (Py_ISSPACE). */
static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* The decimal integer of text[0:len], or NULL (no exception) when it is not a plain one. */
static PyObject *parse_int(const char *text, ssize_t len)
{
    ssize_t i = 0;
    while (i < len && is_space(text[i]))
        i++;
    int negative = 0;
    if (i < len && (text[i] == '-' || text[i] == '+')) {
        negative = text[i] == '-';
        i++;
    }
    uint64_t value = 0;
    ssize_t digits = 0;
    for (; i < len && text[i] >= '0' && text[i] <= '9'; i++, digits++) {
        uint64_t d = (uint64_t)(text[i] - '0');
        if (value > (UINT64_MAX - d) / 10)
            return NULL; /* beyond 64 bits: Python decides */
        value = value * 10 + d;
    }
    while (i < len && is_space(text[i]))
        i++;
    if (digits == 0 || i != len)
        return NULL;
    if (!negative)
        return PyLong_FromUnsignedLongLong(value);
    if (value > (uint64_t)INT64_MAX)
        return NULL;
    return PyLong_FromLongLong(-(int64_t)value);
}

/* Shared driver: read every descriptor, then build each entry with make(). */
static PyObject *batch(PyObject *args, PyObject *(*make)(const char *, ssize_t))
{
    PyObject *seq;
    Py_ssize_t size;
    int recheck = 0;
    if (!PyArg_ParseTuple(args, "On|p", &seq, &size, &recheck))
        return NULL;
    if (size < 1 || size > MAX_SIZE) {
        PyErr_SetString(PyExc_ValueError, "size must be between 1 and 4096");
        return NULL;
    }
    int *fds;
    Py_ssize_t n = collect_fds(seq, &fds);
    if (n < 0)
        return NULL;
    char *buf = PyMem_Malloc((size_t)(n > 0 ? n : 1) * (size_t)size);
    result_t *res = PyMem_Malloc(sizeof(result_t) * (size_t)(n > 0 ? n : 1));
    PyObject *out = NULL;
    if (buf == NULL || res == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    read_all(fds, n, buf, size, res, recheck);
    out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = NULL;
        if (res[i].len >= 0) {
            item = make(buf + res[i].off, res[i].len);
            if (item == NULL && PyErr_Occurred()) {
                Py_CLEAR(out);
                goto done;
            }
        }
        if (item == NULL)
            item = Py_NewRef(Py_None);
        PyList_SET_ITEM(out, i, item);
    }
done:
    PyMem_Free(res);
    PyMem_Free(buf);
    PyMem_Free(fds);
    return out;
}

/* As parse_int, and NULL for a negative value: a u64 counter as the kernel prints it
 * (drivers/cpuidle/sysfs.c "%llu"), so the caller need not check the range. */
static PyObject *parse_counter(const char *text, ssize_t len)
{
    for (ssize_t i = 0; i < len && text[i] != '\n'; i++)
        if (text[i] == '-')
            return NULL;
    return parse_int(text, len);
}

static PyObject *make_bytes(const char *text, ssize_t len)
{
    return PyBytes_FromStringAndSize(text, len);
}

static PyObject *pread_ints(PyObject *self, PyObject *args)
{
    (void)self;
    return batch(args, parse_int);
}

static PyObject *pread_counters(PyObject *self, PyObject *args)
{
    (void)self;
    return batch(args, parse_counter);
}

static PyObject *pread_bytes(PyObject *self, PyObject *args)
{
    (void)self;
    return batch(args, make_bytes);
}

static PyMethodDef methods[] = {
    {"pread_ints", pread_ints, METH_VARARGS,
     "pread_ints(fds, size, recheck=False) -> list: each descriptor's first size bytes "
     "as a decimal integer, None where the descriptor is -1, the read failed or the text "
     "is not a plain 64-bit integer; with recheck also where the file was unlinked."},
    {"pread_counters", pread_counters, METH_VARARGS,
     "pread_counters(fds, size, recheck=False) -> list: as pread_ints, and None for a "
     "negative value: every value returned is within 0 and 2**64 - 1."},
    {"pread_bytes", pread_bytes, METH_VARARGS,
     "pread_bytes(fds, size, recheck=False) -> list: each descriptor's first size bytes, "
     "None where the descriptor is -1 or the read failed; with recheck also where the "
     "file was unlinked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastread",
    "Batched pread(2) of kept-open sysfs attributes (see batch.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastread(void)
{
    return PyModule_Create(&module);
}
