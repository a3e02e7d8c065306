//! `FUNCTIONS.md` tells the truth: every function it marks **yes** is
//! exported by the built library under its `MPI_` and `PMPI_` names and
//! called by the C suite programs it names; every **no** is not exported;
//! the count line adds up. With MPICH's headers installed, every C
//! function of MPI-3.1 (outside the chapters tmx leaves out) is in the
//! table.
//!
//! `TMX_WRITE_FUNCTIONS=1 cargo test -p mpi-abi --test functions`
//! rewrites the table from MPICH's `mpi_proto.h`, the built library and
//! the C suite.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The built library's bytes.
fn library() -> Vec<u8> {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let lib = dir.join("libmpich.so");
    std::fs::read(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()))
}

/// The NUL-delimited strings of the library that look like MPI symbol
/// names (its symbol tables hold every exported name so).
fn symbols(lib: &[u8]) -> HashSet<String> {
    lib.split(|b| *b == 0)
        .filter(|s| s.starts_with(b"MPI_") || s.starts_with(b"PMPI_"))
        .filter_map(|s| std::str::from_utf8(s).ok())
        .map(String::from)
        .collect()
}

fn has_symbol(lib: &HashSet<String>, name: &str) -> bool {
    lib.contains(name)
}

/// The C suite's sources by program name.
fn suite() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(crate_dir().join("c")).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "c" || x == "h") {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            out.insert(name, std::fs::read_to_string(&p).unwrap());
        }
    }
    out
}

/// Whether `text` contains `name` as a whole identifier.
fn mentions(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// One row of the table.
#[derive(Debug)]
struct Row {
    name: String,
    yes: bool,
    tests: Vec<String>,
}

fn parse(md: &str) -> Vec<Row> {
    md.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            if cells.len() < 4 {
                return None;
            }
            let name = cells[1].strip_prefix('`')?.strip_suffix('`')?;
            let yes = match cells[2] {
                "yes" => true,
                "no" => false,
                _ => return None,
            };
            let tests = cells[3]
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect();
            Some(Row {
                name: name.to_string(),
                yes,
                tests,
            })
        })
        .collect()
}

/// MPI-4.0 additions MPICH 4.0's header has (not MPI-3.1).
const MPI4: &[&str] = &[
    "MPI_Allgather_init",
    "MPI_Allgatherv_init",
    "MPI_Allreduce_init",
    "MPI_Alltoall_init",
    "MPI_Alltoallv_init",
    "MPI_Alltoallw_init",
    "MPI_Barrier_init",
    "MPI_Bcast_init",
    "MPI_Exscan_init",
    "MPI_Gather_init",
    "MPI_Gatherv_init",
    "MPI_Neighbor_allgather_init",
    "MPI_Neighbor_allgatherv_init",
    "MPI_Neighbor_alltoall_init",
    "MPI_Neighbor_alltoallv_init",
    "MPI_Neighbor_alltoallw_init",
    "MPI_Reduce_init",
    "MPI_Reduce_scatter_block_init",
    "MPI_Reduce_scatter_init",
    "MPI_Scan_init",
    "MPI_Scatter_init",
    "MPI_Scatterv_init",
    "MPI_Comm_create_from_group",
    "MPI_Comm_idup_with_info",
    "MPI_Group_from_session_pset",
    "MPI_Info_create_env",
    "MPI_Info_get_string",
    "MPI_Intercomm_create_from_groups",
    "MPI_Isendrecv",
    "MPI_Isendrecv_replace",
    "MPI_Parrived",
    "MPI_Pready",
    "MPI_Pready_list",
    "MPI_Pready_range",
    "MPI_Precv_init",
    "MPI_Psend_init",
    "MPI_Status_c2f08",
    "MPI_Status_f082c",
    "MPI_Status_f082f",
    "MPI_Status_f2f08",
    "MPI_DUP_FN",
];

/// Functions of the chapters left out, or removed before MPI-3.1.
fn out_of_scope(name: &str) -> bool {
    const DYN: &[&str] = &[
        "MPI_Comm_spawn",
        "MPI_Comm_spawn_multiple",
        "MPI_Comm_accept",
        "MPI_Comm_connect",
        "MPI_Comm_join",
        "MPI_Open_port",
        "MPI_Close_port",
        "MPI_Publish_name",
        "MPI_Unpublish_name",
        "MPI_Lookup_name",
        "MPI_Comm_get_parent",
        "MPI_Comm_disconnect",
    ];
    const FORTRAN: &[&str] = &[
        "MPI_Type_create_f90_integer",
        "MPI_Type_create_f90_real",
        "MPI_Type_create_f90_complex",
        "MPI_Status_c2f",
        "MPI_Status_f2c",
        "MPI_Type_match_size",
        "MPI_File_c2f",
        "MPI_File_f2c",
        "MPI_Info_c2f",
        "MPI_Info_f2c",
    ];
    const REMOVED: &[&str] = &[
        "MPI_Address",
        "MPI_Errhandler_create",
        "MPI_Errhandler_get",
        "MPI_Errhandler_set",
        "MPI_Type_extent",
        "MPI_Type_hindexed",
        "MPI_Type_hvector",
        "MPI_Type_lb",
        "MPI_Type_struct",
        "MPI_Type_ub",
    ];
    name.starts_with("MPI_T_")
        || name.starts_with("MPI_File_")
        || name.starts_with("MPI_Session_")
        || name == "MPI_Register_datarep"
        || DYN.contains(&name)
        || FORTRAN.contains(&name)
        || REMOVED.contains(&name)
        || MPI4.contains(&name)
}

/// The C functions MPICH's installed headers declare, if installed.
fn mpich_functions() -> Option<Vec<String>> {
    let dir = Path::new("/usr/include/x86_64-linux-gnu/mpich");
    let mut text = std::fs::read_to_string(dir.join("mpi_proto.h")).ok()?;
    text.push_str(&std::fs::read_to_string(dir.join("mpio.h")).unwrap_or_default());
    let mut names: Vec<String> = Vec::new();
    for (i, _) in text.match_indices("MPI_") {
        if text[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        let cap = name.as_bytes().get(4).is_some_and(u8::is_ascii_uppercase);
        if cap && rest[end..].starts_with('(') && !name.ends_with("_c") {
            names.push(name.to_string());
        }
    }
    names.sort();
    names.dedup();
    Some(names)
}

/// The standard's chapter of an in-scope function.
fn chapter(name: &str) -> &'static str {
    let s = &name[4..];
    const RMA: &[&str] = &[
        "Put",
        "Get",
        "Accumulate",
        "Get_accumulate",
        "Fetch_and_op",
        "Compare_and_swap",
        "Rput",
        "Rget",
        "Raccumulate",
        "Rget_accumulate",
    ];
    const COLL: &[&str] = &[
        "Barrier",
        "Bcast",
        "Gather",
        "Gatherv",
        "Scatter",
        "Scatterv",
        "Allgather",
        "Allgatherv",
        "Alltoall",
        "Alltoallv",
        "Alltoallw",
        "Reduce",
        "Allreduce",
        "Reduce_scatter",
        "Reduce_scatter_block",
        "Scan",
        "Exscan",
    ];
    let lower_coll = |x: &str| COLL.iter().any(|c| c.to_lowercase() == x);
    if RMA.contains(&s) || s.starts_with("Win_") {
        "11 One-sided communication"
    } else if [
        "Type_",
        "Pack",
        "Unpack",
        "Get_address",
        "Get_elements",
        "Aint_",
        "Status_set_elements",
    ]
    .iter()
    .any(|p| s.starts_with(p))
    {
        "4 Datatypes"
    } else if ["Group_", "Comm_", "Intercomm_", "Keyval_", "Attr_"]
        .iter()
        .any(|p| s.starts_with(p))
    {
        "6 Groups, contexts, communicators, caching"
    } else if [
        "Cart",
        "Graph",
        "Dist_graph",
        "Dims_",
        "Topo_",
        "Neighbor_",
        "Ineighbor_",
    ]
    .iter()
    .any(|p| s.starts_with(p))
    {
        "7 Process topologies"
    } else if COLL.contains(&s)
        || ["Reduce_local", "Op_create", "Op_free", "Op_commutative"].contains(&s)
        || (s.starts_with('I') && lower_coll(&s[1..]))
    {
        "5 Collective communication"
    } else if s.starts_with("Info_") {
        "9 Info objects"
    } else if [
        "Grequest",
        "Status_set_cancelled",
        "Query_thread",
        "Is_thread_main",
        "Init_thread",
        "Add_error",
    ]
    .iter()
    .any(|p| s.starts_with(p))
    {
        "12 External interfaces"
    } else if [
        "Init",
        "Finalize",
        "Initialized",
        "Finalized",
        "Abort",
        "Wtime",
        "Wtick",
        "Get_processor_name",
        "Get_version",
        "Get_library_version",
        "Error_",
        "Errhandler_",
        "Alloc_mem",
        "Free_mem",
        "Pcontrol",
    ]
    .iter()
    .any(|p| s.starts_with(p))
    {
        "8 Environment, errors, profiling"
    } else {
        "3 Point-to-point communication"
    }
}

/// A row to write: function, implemented, the programs calling it.
type TableRow<'a> = (&'a str, bool, Vec<&'a str>);

/// The table, written from MPICH's header, the library and the suite.
fn generate(names: &[String], lib: &HashSet<String>, suite: &BTreeMap<String, String>) -> String {
    let scope: Vec<&String> = names.iter().filter(|n| !out_of_scope(n)).collect();
    let mut chapters: BTreeMap<u32, (&str, Vec<TableRow<'_>>)> = BTreeMap::new();
    let mut yes = 0;
    for n in &scope {
        let exported = has_symbol(lib, n) && has_symbol(lib, &format!("P{n}"));
        let tests: Vec<&str> = suite
            .iter()
            .filter(|(_, src)| mentions(src, n))
            .map(|(k, _)| k.as_str())
            .collect();
        let ok = exported && !tests.is_empty();
        yes += usize::from(ok);
        let c = chapter(n);
        let num: u32 = c
            .split(' ')
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0);
        chapters
            .entry(num)
            .or_insert((c, Vec::new()))
            .1
            .push((n, ok, tests));
    }
    let mut out = String::new();
    out.push_str("# MPI-3.1 functions in libmpich.so.12 (mpi-abi)\n\n");
    out.push_str(
        "Every C function of MPI-3.1 outside the chapters tmx does not support\n\
         (MPI-IO, dynamic processes, the tools interface, the Fortran bindings),\n\
         by chapter of the standard. **yes**: exported as `MPI_` and `PMPI_`,\n\
         and called by the C suite programs named (`mpi-abi/c/`), whose output\n\
         is compared against MPICH's; **no**: not provided yet (the loader\n\
         refuses a program that calls it). `cargo test -p mpi-abi --test functions`\n\
         checks this table against the built library and the C suite\n\
         (`TMX_WRITE_FUNCTIONS=1` rewrites it).\n\n",
    );
    out.push_str(&format!(
        "**{yes} of {} implemented ({:.1} %).**\n\n",
        scope.len(),
        100.0 * yes as f64 / scope.len() as f64
    ));
    for (_, (title, rows)) in chapters {
        out.push_str(&format!(
            "## {title}\n\n| function | status | C tests |\n|---|---|---|\n"
        ));
        for (n, ok, tests) in rows {
            let t = if ok { tests.join(", ") } else { String::new() };
            out.push_str(&format!(
                "| `{n}` | {} | {t} |\n",
                if ok { "yes" } else { "no" }
            ));
        }
        out.push('\n');
    }
    out.push_str(NOT_IN_SCOPE);
    out
}

/// The closing section of the table.
const NOT_IN_SCOPE: &str = "## Not in scope\n\n\
Exported so that a program that links them loads, and failing with\n\
`MPI_ERR_UNSUPPORTED_OPERATION` (MPI-IO: returned, as a file's default\n\
error handler does; dynamic processes and Fortran: raised on\n\
`MPI_COMM_WORLD`) or, for the tools interface, `MPI_T_ERR_CANNOT_INIT` /\n\
`MPI_T_ERR_NOT_INITIALIZED`. `MPI_Comm_get_parent` gives `MPI_COMM_NULL`,\n\
`MPI_Comm_disconnect` frees the communicator, and `MPI_Status_c2f`/`f2c`\n\
and `MPI_Type_match_size` work. The MPI-3.0 removals MPICH still exports\n\
(`MPI_Address`, `MPI_Errhandler_create`/`get`/`set`, `MPI_Type_extent`,\n\
`hindexed`, `hvector`, `lb`, `struct`, `ub`) are exported too.\n";

#[test]
fn the_function_table_matches_the_library_and_the_suite() {
    let lib = symbols(&library());
    let suite = suite();
    let path = crate_dir().join("FUNCTIONS.md");
    if std::env::var_os("TMX_WRITE_FUNCTIONS").is_some() {
        let names = mpich_functions().expect("MPICH's mpi_proto.h is needed to write the table");
        std::fs::write(&path, generate(&names, &lib, &suite)).unwrap();
    }
    let md = std::fs::read_to_string(&path).unwrap();
    let rows = parse(&md);
    assert!(rows.len() > 250, "only {} rows in FUNCTIONS.md", rows.len());
    let mut yes = 0;
    for r in &rows {
        let exported = has_symbol(&lib, &r.name) && has_symbol(&lib, &format!("P{}", r.name));
        if r.yes {
            yes += 1;
            assert!(
                exported,
                "{} is marked yes but not exported (MPI_ and PMPI_)",
                r.name
            );
            assert!(
                !r.tests.is_empty(),
                "{} is marked yes without a C test",
                r.name
            );
            for t in &r.tests {
                let src = suite
                    .get(t)
                    .unwrap_or_else(|| panic!("{}: no program {t}", r.name));
                assert!(mentions(src, &r.name), "{t} does not call {}", r.name);
            }
        } else {
            assert!(
                !has_symbol(&lib, &r.name),
                "{} is marked no but exported",
                r.name
            );
        }
    }
    let count = format!("**{yes} of {} implemented", rows.len());
    assert!(md.contains(&count), "the count line should say {count}");
    if let Some(names) = mpich_functions() {
        for n in names.iter().filter(|n| !out_of_scope(n)) {
            assert!(
                rows.iter().any(|r| &r.name == n),
                "{n} is missing from FUNCTIONS.md"
            );
        }
    } else {
        println!("MPICH's headers are not installed: the table's completeness is not checked");
    }
}
