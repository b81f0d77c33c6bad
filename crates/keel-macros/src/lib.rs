//! `#[keel::main]` and `#[keel::test]`: an `async fn` run to completion on
//! a keel runtime built for it. Use them through `keel` (its `macros`
//! feature, on by default), not this crate directly.
//!
//! Both accept the same options, each optional:
//!
//! - `workers = N`: worker threads (default: `Builder`'s, the available
//!   CPUs);
//! - `spin = "none" | "short" | "medium" | "long"`: the spin policy
//!   (default `"none"`);
//! - `class = "name"`: run the body as a task in this class (`"urgent"`,
//!   `"normal"`, `"bulk"` or none) instead of on the calling thread through
//!   `block_on`. The body must then be `Send + 'static`, as a spawned task
//!   is; a panic in it is resumed on the calling thread;
//! - `tokio_on_workers = true | false`: run the tokio side (keel's feature
//!   `tokio-context`) on the workers (`Builder::tokio_on_workers`; default
//!   false).
//!
//! The expansion is plain: `Runtime::builder()` with the options,
//! `build()`, then `block_on`. A runtime that cannot be built (no thread
//! could be started) panics with the OS error.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ItemFn, Lit, MetaNameValue, Token};

/// Runs `async fn main` on a keel runtime.
///
/// ```ignore
/// #[keel::main(workers = 2, spin = "short")]
/// async fn main() -> std::io::Result<()> {
///     let listener = keel::net::TcpListener::bind("127.0.0.1:0")?;
///     println!("listening on {}", listener.local_addr()?);
///     Ok(())
/// }
/// ```
///
/// See the crate docs for the options.
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args.into(), item.into(), Kind::Main).into()
}

/// Runs an `async fn` test on a keel runtime built for it (one per test).
///
/// ```ignore
/// #[keel::test(workers = 1)]
/// async fn answers() {
///     assert_eq!(keel::spawn(async { 42 }).await.unwrap(), 42);
/// }
/// ```
///
/// See the crate docs for the options.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args.into(), item.into(), Kind::Test).into()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Main,
    Test,
}

/// The options given in the attribute.
#[derive(Default)]
struct Options {
    workers: Option<(usize, Span)>,
    spin: Option<(String, Span)>,
    class: Option<(String, Span)>,
    tokio_on_workers: Option<(bool, Span)>,
}

fn expand(args: TokenStream2, item: TokenStream2, kind: Kind) -> TokenStream2 {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(error) => return with_item(error, item),
    };
    let options = match parse_options(args) {
        Ok(options) => options,
        Err(error) => return with_item(error, item),
    };
    match build(function, options, kind) {
        Ok(tokens) => tokens,
        Err(error) => with_item(error, item),
    }
}

/// The error, plus the item unchanged, so that the compiler reports the
/// attribute's mistake alone rather than a cascade from a missing `main`.
fn with_item(error: syn::Error, item: TokenStream2) -> TokenStream2 {
    let error = error.to_compile_error();
    quote! { #error #item }
}

fn parse_options(args: TokenStream2) -> syn::Result<Options> {
    let pairs = Punctuated::<MetaNameValue, Token![,]>::parse_terminated.parse2(args)?;
    let mut options = Options::default();
    for pair in pairs {
        let name = pair
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let span = pair.value.span();
        match name.as_str() {
            "workers" => {
                let workers: usize = int_literal(&pair.value)?;
                if workers == 0 {
                    return Err(syn::Error::new(span, "`workers` must be at least 1"));
                }
                options.workers = Some((workers, span));
            }
            "spin" => {
                let spin = str_literal(&pair.value)?;
                if !["none", "short", "medium", "long"].contains(&spin.as_str()) {
                    return Err(syn::Error::new(
                        span,
                        "`spin` is one of \"none\", \"short\", \"medium\", \"long\"",
                    ));
                }
                options.spin = Some((spin, span));
            }
            "class" => options.class = Some((str_literal(&pair.value)?, span)),
            "tokio_on_workers" => {
                options.tokio_on_workers = Some((bool_literal(&pair.value)?, span))
            }
            _ => {
                return Err(syn::Error::new(
                    pair.path.span(),
                    "unknown option: expected `workers`, `spin`, `class` or `tokio_on_workers`",
                ))
            }
        }
    }
    Ok(options)
}

fn int_literal(value: &Expr) -> syn::Result<usize> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int.base10_parse(),
        other => Err(syn::Error::new(other.span(), "expected an integer")),
    }
}

fn bool_literal(value: &Expr) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(boolean),
            ..
        }) => Ok(boolean.value),
        other => Err(syn::Error::new(other.span(), "expected `true` or `false`")),
    }
}

fn str_literal(value: &Expr) -> syn::Result<String> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(string),
            ..
        }) => Ok(string.value()),
        other => Err(syn::Error::new(other.span(), "expected a string")),
    }
}

fn build(mut function: ItemFn, options: Options, kind: Kind) -> syn::Result<TokenStream2> {
    let sig = &mut function.sig;
    if sig.asyncness.is_none() {
        let what = if kind == Kind::Main { "main" } else { "test" };
        return Err(syn::Error::new(
            sig.fn_token.span(),
            format!("#[keel::{what}] needs an `async fn`"),
        ));
    }
    if !sig.inputs.is_empty() {
        return Err(syn::Error::new(
            sig.inputs.span(),
            "the function must take no arguments",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "the function must not be generic",
        ));
    }
    sig.asyncness = None;
    let output = match &sig.output {
        syn::ReturnType::Default => quote! { () },
        syn::ReturnType::Type(_, ty) => quote! { #ty },
    };
    let mut builder = quote! { ::keel::Runtime::builder() };
    if let Some((workers, span)) = options.workers {
        builder = quote_spanned! {span=> #builder.workers(#workers) };
    }
    if let Some((spin, span)) = &options.spin {
        let policy = match spin.as_str() {
            "short" => quote! { Short },
            "medium" => quote! { Medium },
            "long" => quote! { Long },
            _ => quote! { None },
        };
        builder = quote_spanned! {*span=> #builder.spin(::keel::SpinPolicy::#policy) };
    }
    if let Some((on, span)) = options.tokio_on_workers {
        builder = quote_spanned! {span=> #builder.tokio_on_workers(#on) };
    }
    let body = &function.block;
    let run = match &options.class {
        None => quote! { runtime.block_on(async move #body) },
        Some((class, span)) => quote_spanned! {*span=>
            {
                let class = runtime.handle().class(#class).unwrap_or_else(|| {
                    ::std::panic!("keel: the runtime has no class named {:?}", #class)
                });
                let task = runtime.spawn_in(class, async move #body);
                match runtime.block_on(task) {
                    ::std::result::Result::Ok(output) => output,
                    ::std::result::Result::Err(error) => match error.try_into_panic() {
                        ::std::result::Result::Ok(payload) => ::std::panic::resume_unwind(payload),
                        ::std::result::Result::Err(error) => ::std::panic!("keel: {error}"),
                    },
                }
            }
        },
    };
    let attrs = &function.attrs;
    let vis = &function.vis;
    let sig = &function.sig;
    let test_attr = if kind == Kind::Test {
        quote! { #[::core::prelude::v1::test] }
    } else {
        quote! {}
    };
    Ok(quote! {
        #test_attr
        #(#attrs)*
        #vis #sig {
            let runtime = #builder
                .build()
                .expect("keel: the runtime could not be built");
            let output: #output = #run;
            output
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{expand, Kind, TokenStream2};

    fn expand_str(args: &str, item: &str, kind: Kind) -> String {
        let args: TokenStream2 = args.parse().unwrap();
        let item: TokenStream2 = item.parse().unwrap();
        expand(args, item, kind).to_string()
    }

    /// The message of the `compile_error!` an expansion carries, if any.
    fn error_of(expanded: &str) -> Option<String> {
        let start = expanded.find("compile_error !")?;
        let rest = &expanded[start..];
        let open = rest.find('"')? + 1;
        let close = rest[open..].find('"')? + open;
        Some(rest[open..close].to_string())
    }

    #[test]
    fn options_become_builder_calls() {
        let out = expand_str(
            "workers = 3, spin = \"medium\", tokio_on_workers = true",
            "async fn main() {}",
            Kind::Main,
        );
        assert_eq!(error_of(&out), None, "{out}");
        assert!(out.contains(". workers (3usize)"), "{out}");
        assert!(out.contains("SpinPolicy :: Medium"), "{out}");
        assert!(out.contains(". tokio_on_workers (true)"), "{out}");
        assert!(out.contains("block_on"), "{out}");
        assert!(!out.contains("async fn main"), "{out}");
    }

    #[test]
    fn a_test_gets_the_test_attribute_and_a_class_spawns_the_body() {
        let out = expand_str("class = \"bulk\"", "async fn t() {}", Kind::Test);
        assert_eq!(error_of(&out), None, "{out}");
        assert!(out.contains("test"), "{out}");
        assert!(out.contains("spawn_in"), "{out}");
        assert!(out.contains("\"bulk\""), "{out}");
    }

    #[test]
    fn bad_options_are_compile_errors_that_keep_the_item() {
        for (args, message) in [
            ("threads = 2", "unknown option"),
            ("workers = 0", "at least 1"),
            ("workers = \"two\"", "expected an integer"),
            ("spin = \"fast\"", "`spin` is one of"),
            ("tokio_on_workers = 1", "expected `true` or `false`"),
            ("spin = 3", "expected a string"),
            ("workers", "expected `=`"),
        ] {
            let out = expand_str(args, "async fn main() {}", Kind::Main);
            let error = error_of(&out).unwrap_or_default();
            assert!(error.contains(message), "{args}: {error:?} in {out}");
            assert!(out.contains("async fn main"), "the item is kept: {out}");
        }
    }

    #[test]
    fn functions_that_cannot_be_run_are_compile_errors() {
        for (item, message) in [
            ("fn main() {}", "needs an `async fn`"),
            ("async fn main(x: u8) {}", "no arguments"),
            ("async fn main<T>() {}", "not be generic"),
        ] {
            let out = expand_str("", item, Kind::Main);
            let error = error_of(&out).unwrap_or_default();
            assert!(error.contains(message), "{item}: {error:?}");
        }
        let out = expand_str("", "struct NotAFunction;", Kind::Test);
        assert!(error_of(&out).is_some(), "{out}");
    }
}
