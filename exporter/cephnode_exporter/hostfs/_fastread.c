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

/* ---------------------------------------------------------------- thread statuses
 *
 * The three lines hostfs/process.py takes from every thread of an OSD but its leader, as
 * fs/proc/array.c proc_pid_status() prints them: "Cpus_allowed_list:\t<list>", then
 * (after the Mems_allowed lines) "voluntary_ctxt_switches:\t<n>" directly followed by
 * "nonvoluntary_ctxt_switches:\t<n>". The contract is _thread_counts' (process.py): an
 * entry this code is not sure of is left to Python, which takes it line by line and
 * names a fault; nothing is accepted that its regular expression would refuse. */

static const char *find(const char *hay, const char *end, const char *needle)
{
    size_t n = strlen(needle);
    if (end - hay < (ssize_t)n)
        return NULL;
    return memmem(hay, (size_t)(end - hay), needle, n);
}

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* A decimal u64 at p (after blanks), then blanks, then a newline (or, when at_end_ok, the
 * end of the text). Sets *next past the newline; 0 when anything else is there. */
static int line_number(const char *p, const char *end, int at_end_ok, uint64_t *value,
                       const char **next)
{
    p = skip_blanks(p, end);
    uint64_t v = 0;
    const char *start = p;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0; /* beyond 64 bits: Python decides */
        v = v * 10 + d;
    }
    if (p == start)
        return 0;
    p = skip_blanks(p, end);
    if (p < end) {
        if (*p != '\n')
            return 0;
        p++;
    } else if (!at_end_ok) {
        return 0;
    }
    *value = v;
    *next = p;
    return 1;
}

/* (voluntary, involuntary, allowed-CPU list) of one status, or 0 when not sure. */
static int status_fields(const char *text, Py_ssize_t len, uint64_t *vol, uint64_t *invol,
                         const char **cpus, Py_ssize_t *cpus_len)
{
    static const char allowed_key[] = "\nCpus_allowed_list:";
    static const char vol_key[] = "\nvoluntary_ctxt_switches:";
    static const char invol_key[] = "nonvoluntary_ctxt_switches:";
    const char *end = text + len;
    const char *p = find(text, end, allowed_key);
    if (p == NULL)
        return 0;
    p = skip_blanks(p + sizeof(allowed_key) - 1, end);
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (eol == NULL)
        return 0;
    const char *last = eol;
    while (last > p && (last[-1] == ' ' || last[-1] == '\t'))
        last--;
    for (const char *c = p; c < last; c++)
        if ((unsigned char)*c >= 0x80)
            return 0; /* not ASCII: Python decides */
    *cpus = p;
    *cpus_len = last - p;
    /* The voluntary line at a line start after it; the next line must be involuntary. */
    const char *v = find(eol, end, vol_key);
    if (v == NULL)
        return 0;
    const char *next;
    if (!line_number(v + sizeof(vol_key) - 1, end, 0, vol, &next))
        return 0;
    if (end - next < (ssize_t)(sizeof(invol_key) - 1) ||
        memcmp(next, invol_key, sizeof(invol_key) - 1) != 0)
        return 0;
    return line_number(next + sizeof(invol_key) - 1, end, 1, invol, &next);
}

/* status_counts(tids, texts) -> (counts, cpu_lists, rest): see the method table. */
static PyObject *status_counts(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *tids_arg, *texts_arg;
    if (!PyArg_ParseTuple(args, "OO", &tids_arg, &texts_arg))
        return NULL;
    PyObject *tids = PySequence_Fast(tids_arg, "tids must be a sequence");
    if (tids == NULL)
        return NULL;
    PyObject *texts = PySequence_Fast(texts_arg, "texts must be a sequence");
    if (texts == NULL) {
        Py_DECREF(tids);
        return NULL;
    }
    PyObject *counts = NULL, *lists = NULL, *rest = NULL, *out = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(tids);
    if (PySequence_Fast_GET_SIZE(texts) != n) {
        PyErr_SetString(PyExc_ValueError, "tids and texts differ in length");
        goto done;
    }
    counts = PyDict_New();
    lists = PySet_New(NULL);
    rest = PyList_New(0);
    if (counts == NULL || lists == NULL || rest == NULL)
        goto done;
    PyObject **tid_items = PySequence_Fast_ITEMS(tids);
    PyObject **text_items = PySequence_Fast_ITEMS(texts);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = text_items[i];
        uint64_t vol, invol;
        const char *cpus;
        Py_ssize_t cpus_len;
        if (!PyBytes_Check(text) ||
            !status_fields(PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text), &vol, &invol, &cpus,
                           &cpus_len)) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(rest, index) < 0) {
                Py_XDECREF(index);
                goto done;
            }
            Py_DECREF(index);
            continue;
        }
        PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)vol, (unsigned long long)invol);
        if (pair == NULL)
            goto done;
        int failed = PyDict_SetItem(counts, tid_items[i], pair) < 0;
        Py_DECREF(pair);
        if (failed)
            goto done;
        PyObject *list = PyBytes_FromStringAndSize(cpus, cpus_len);
        if (list == NULL)
            goto done;
        failed = PySet_Add(lists, list) < 0;
        Py_DECREF(list);
        if (failed)
            goto done;
    }
    out = PyTuple_Pack(3, counts, lists, rest);
done:
    Py_XDECREF(counts);
    Py_XDECREF(lists);
    Py_XDECREF(rest);
    Py_DECREF(tids);
    Py_DECREF(texts);
    return out;
}

static PyMethodDef methods[] = {
    {"status_counts", status_counts, METH_VARARGS,
     "status_counts(tids, texts) -> (counts, cpu_lists, rest): of each thread's status "
     "text (bytes, or None), {tid: (voluntary, involuntary)} and the distinct "
     "Cpus_allowed_list values (bytes), and the indices of the texts not read here (None, "
     "or not the shape proc_pid_status() prints), which the caller reads itself."},
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
