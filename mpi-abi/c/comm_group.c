/* ranks: 1 2 3 4 */
/* Groups and communicators: group algebra, translation, comparison,
 * comm_create(_group), split, split_type, dup(_with_info), idup, names,
 * MPI_COMM_SELF, attributes with copy/delete callbacks, info objects. */
#include "tmx_test.h"

static void show_group(const char *what, MPI_Group g)
{
    int n, r;
    OK(MPI_Group_size(g, &n));
    OK(MPI_Group_rank(g, &r));
    int ranks[8], out[8];
    MPI_Group w;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &w));
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    OK(MPI_Group_translate_ranks(g, n, ranks, w, out));
    char line[128] = "";
    for (int i = 0; i < n; i++)
        sprintf(line + strlen(line), " %d", out[i]);
    say("%s: size %d rank %s, world ranks%s", what, n, r == MPI_UNDEFINED ? "undefined" : "", line);
    if (r != MPI_UNDEFINED)
        say("  my rank %d", r);
    OK(MPI_Group_free(&w));
}

static void groups(void)
{
    MPI_Group w, a, b, u, i, d, e;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &w));
    int evens[4], ne = 0, odds[4], no = 0;
    for (int k = 0; k < T_size; k++) {
        if (k % 2 == 0)
            evens[ne++] = k;
        else
            odds[no++] = T_size - k;
    }
    OK(MPI_Group_incl(w, ne, evens, &a));
    show_group("evens", a);
    int rev[4];
    for (int k = 0; k < T_size; k++)
        rev[k] = T_size - 1 - k;
    OK(MPI_Group_incl(w, T_size, rev, &b));
    show_group("reversed", b);
    OK(MPI_Group_union(a, b, &u));
    show_group("union", u);
    OK(MPI_Group_intersection(b, a, &i));
    show_group("intersection", i);
    OK(MPI_Group_difference(b, a, &d));
    show_group("difference", d);
    OK(MPI_Group_excl(w, ne, evens, &e));
    show_group("excl evens", e);
    int cmp;
    OK(MPI_Group_compare(w, b, &cmp));
    say("compare world reversed: %d", cmp);
    OK(MPI_Group_compare(w, u, &cmp));
    say("compare world union: %d", cmp);
    OK(MPI_Group_compare(a, a, &cmp));
    say("compare same: %d", cmp);
    int ranges[1][3] = {{T_size - 1, 0, -2}};
    MPI_Group rg;
    OK(MPI_Group_range_incl(w, 1, ranges, &rg));
    show_group("range_incl", rg);
    MPI_Group rx;
    OK(MPI_Group_range_excl(w, 1, ranges, &rx));
    show_group("range_excl", rx);
    say("empty is empty group %d", rx == MPI_GROUP_EMPTY || T_size > 1);
    int bad[1] = {T_size};
    MPI_Group x;
    CLASS("incl bad rank", MPI_Group_incl(w, 1, bad, &x));
    int pn = MPI_PROC_NULL, outp;
    OK(MPI_Group_translate_ranks(w, 1, &pn, a, &outp));
    say("translate proc_null: %d", outp);
    MPI_Group gs[] = {w, a, b, u, i, d, e, rg, rx};
    for (unsigned k = 0; k < sizeof gs / sizeof gs[0]; k++)
        if (gs[k] != MPI_GROUP_EMPTY)
            OK(MPI_Group_free(&gs[k]));
    (void)odds;
}

static void comms(void)
{
    MPI_Comm c, d, s, half;
    int cmp, rank, size;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_compare(MPI_COMM_WORLD, d, &cmp));
    say("compare world dup: %d", cmp);
    OK(MPI_Comm_compare(d, d, &cmp));
    say("compare dup dup: %d", cmp);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    say("world name '%s' %d", name, len);
    OK(MPI_Comm_get_name(MPI_COMM_SELF, name, &len));
    say("self name '%s'", name);
    OK(MPI_Comm_get_name(d, name, &len));
    say("dup name '%s' %d", name, len);
    OK(MPI_Comm_set_name(d, "my dup"));
    OK(MPI_Comm_get_name(d, name, &len));
    say("dup renamed '%s'", name);
    OK(MPI_Comm_split(MPI_COMM_WORLD, T_rank % 2, -T_rank, &half));
    OK(MPI_Comm_rank(half, &rank));
    OK(MPI_Comm_size(half, &size));
    say("split: rank %d of %d", rank, size);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, half, &cmp));
    say("compare world half: %d", cmp);
    OK(MPI_Comm_split(MPI_COMM_WORLD, T_rank == 0 ? MPI_UNDEFINED : 1, 0, &s));
    say("split undefined null %d", s == MPI_COMM_NULL);
    if (s != MPI_COMM_NULL)
        OK(MPI_Comm_free(&s));
    MPI_Group w, g;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &w));
    int first = 0;
    OK(MPI_Group_excl(w, 1, &first, &g));
    OK(MPI_Comm_create(MPI_COMM_WORLD, g, &c));
    if (c == MPI_COMM_NULL) {
        say("create: null");
    } else {
        OK(MPI_Comm_rank(c, &rank));
        OK(MPI_Comm_size(c, &size));
        int sum;
        OK(MPI_Allreduce(&T_rank, &sum, 1, MPI_INT, MPI_SUM, c));
        say("create: rank %d of %d, sum %d", rank, size, sum);
        OK(MPI_Comm_free(&c));
    }
    /* create_group: only the group's members call it. */
    if (T_rank != 0) {
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, g, 5, &c));
        OK(MPI_Comm_rank(c, &rank));
        int sum;
        OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, c));
        say("create_group: rank %d sum %d", rank, sum);
        OK(MPI_Comm_free(&c));
    }
    OK(MPI_Group_free(&g));
    OK(MPI_Group_free(&w));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, T_rank, MPI_INFO_NULL, &s));
    OK(MPI_Comm_size(s, &size));
    say("split_type shared: size %d", size);
    OK(MPI_Comm_free(&s));
    MPI_Request r;
    OK(MPI_Comm_idup(MPI_COMM_WORLD, &c, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Comm_size(c, &size));
    say("idup size %d", size);
    OK(MPI_Comm_free(&c));
    OK(MPI_Comm_size(MPI_COMM_SELF, &size));
    OK(MPI_Comm_rank(MPI_COMM_SELF, &rank));
    int v = 42, got = 0;
    OK(MPI_Sendrecv(&v, 1, MPI_INT, 0, 0, &got, 1, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    say("self: rank %d size %d got %d", rank, size, got);
    int flag;
    OK(MPI_Comm_test_inter(d, &flag));
    say("inter %d", flag);
    OK(MPI_Comm_free(&d));
    say("freed null %d, half then", d == MPI_COMM_NULL);
    OK(MPI_Comm_free(&half));
}

static int copies, deletes;

static int copy_fn(MPI_Comm c, int kv, void *extra, void *in, void *out, int *flag)
{
    (void)c;
    (void)kv;
    copies++;
    *(void **)out = (char *)in + *(int *)extra;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int kv, void *val, void *extra)
{
    (void)c;
    (void)kv;
    (void)val;
    (void)extra;
    deletes++;
    return MPI_SUCCESS;
}

static void attributes(void)
{
    static int step = 5;
    int kv, kv2, flag;
    void *v;
    OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &kv, &step));
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &kv2, NULL));
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, kv, &v, &flag));
    say("unset: flag %d", flag);
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, kv, (void *)100));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, kv2, (void *)7));
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, kv, &v, &flag));
    say("set: flag %d value %ld", flag, (long)v);
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, kv, (void *)200));
    say("replaced: deletes %d", deletes);
    MPI_Comm d;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_get_attr(d, kv, &v, &flag));
    say("dup copied: copies %d flag %d value %ld", copies, flag, (long)v);
    OK(MPI_Comm_get_attr(d, kv2, &v, &flag));
    say("null copy fn: flag %d", flag);
    OK(MPI_Comm_free(&d));
    say("free deletes %d", deletes);
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, kv));
    say("delete: deletes %d", deletes);
    CLASS("delete again", MPI_Comm_delete_attr(MPI_COMM_WORLD, kv));
    OK(MPI_Comm_free_keyval(&kv));
    say("keyval invalid %d", kv == MPI_KEYVAL_INVALID);
    int *tag_ub, *wtg;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
    say("tag_ub flag %d at least 32767: %d", flag, *tag_ub >= 32767);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &wtg, &flag));
    say("wtime_is_global flag %d", flag);
    int *host;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &host, &flag));
    say("host flag %d value %d", flag, *host);
    /* Datatype attributes. */
    int tk;
    MPI_Datatype t, t2;
    OK(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &tk, NULL));
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    OK(MPI_Type_set_attr(t, tk, (void *)55));
    OK(MPI_Type_dup(t, &t2));
    OK(MPI_Type_get_attr(t2, tk, &v, &flag));
    say("type attr copied by dup fn: flag %d value %ld", flag, (long)v);
    OK(MPI_Type_delete_attr(t2, tk));
    OK(MPI_Type_get_attr(t2, tk, &v, &flag));
    say("type attr deleted: flag %d", flag);
    OK(MPI_Type_free(&t));
    OK(MPI_Type_free(&t2));
    OK(MPI_Type_free_keyval(&tk));
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, kv2));
    OK(MPI_Comm_free_keyval(&kv2));
}

static void infos(void)
{
    MPI_Info in, dup;
    int n, flag, len;
    char v[64], k[MPI_MAX_INFO_KEY + 1];
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, "b_key", "one"));
    OK(MPI_Info_set(in, "a_key", "two"));
    OK(MPI_Info_set(in, "b_key", "three"));
    OK(MPI_Info_get_nkeys(in, &n));
    say("nkeys %d", n);
    for (int i = 0; i < n; i++) {
        OK(MPI_Info_get_nthkey(in, i, k));
        OK(MPI_Info_get_valuelen(in, k, &len, &flag));
        OK(MPI_Info_get(in, k, 63, v, &flag));
        say("key %d '%s' = '%s' (%d)", i, k, v, len);
    }
    OK(MPI_Info_get(in, "missing", 63, v, &flag));
    say("missing: flag %d", flag);
    CLASS("get into a short value", MPI_Info_get(in, "b_key", 2, v, &flag));
    OK(MPI_Info_dup(in, &dup));
    OK(MPI_Info_delete(in, "a_key"));
    OK(MPI_Info_get_nkeys(in, &n));
    int n2;
    OK(MPI_Info_get_nkeys(dup, &n2));
    say("after delete %d, dup %d", n, n2);
    CLASS("delete missing", MPI_Info_delete(in, "a_key"));
    CLASS("nthkey out of range", MPI_Info_get_nthkey(in, 5, k));
    OK(MPI_Info_free(&in));
    OK(MPI_Info_free(&dup));
    say("info freed null %d", in == MPI_INFO_NULL);
    MPI_Comm c;
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, "mpi_assert_no_any_tag", "true"));
    OK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, in, &c));
    OK(MPI_Info_free(&in));
    OK(MPI_Comm_free(&c));
    say("dup_with_info ok");
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    groups();
    comms();
    attributes();
    infos();
    MPI_Finalize();
    return 0;
}
