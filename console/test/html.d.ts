// index.html, imported as text: build.mjs bundles the tests with esbuild's text loader for .html.
declare module "*.html" {
  const text: string;
  export default text;
}
