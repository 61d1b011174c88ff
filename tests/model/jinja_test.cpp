// The Jinja interpreter: each construct against a hand-written expectation and against
// Python's jinja2 (trim_blocks, lstrip_blocks, transformers' globals), and errors that name
// the construct and its position.
#include <gtest/gtest.h>

#include "jinja_reference.h"
#include "onepass/core/error.h"
#include "model/jinja/jinja.h"

namespace onepass {
namespace {

using model::jinja::Json;

const Json& variables() {
  static const Json v = Json::parse(R"({
    "messages": [{"role": "system", "content": " Sys "}, {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Yo"}],
    "d": {"b": 1, "a": [1, 2.5, null, true, "x'y"]},
    "s": "  Hello World  ", "n": 7, "f": 2.5, "e": [], "u": "h\u00e9llo"})");
  return v;
}

std::string render(std::string_view source, const Json& vars = variables()) {
  return model::jinja::Template(source).render(vars);
}

struct Case {
  const char* source;
  const char* expected;
};

// Every construct the interpreter supports, with what jinja2 renders.
const Case kCases[] = {
    {"{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }}",
     "7 3 -4 2 3.5 1024 2.5"},
    {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1,2] + [3] }}", "a1NoneTrue ababab [1, 2, 3]"},
    {"{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s|upper }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}",
     "Hello World|Hello World|Hello World  |  HELLO WORLD  |Hello World|Hello"},
    {"{{ d }} {{ d|tojson }}", "{'b': 1, 'a': [1, 2.5, None, True, \"x'y\"]} {\"b\": 1, \"a\": [1, 2.5, null, true, \"x'y\"]}"},
    {"{{ {'k': [1, 'é']}|tojson(indent=2) }}", "{\n  \"k\": [\n    1,\n    \"é\"\n  ]\n}"},
    {"{{ 'abcdef'[1:3] }} {{ 'abcdef'[::-1] }} {{ [1,2,3,4][::2] }} {{ [1,2,3,4][-2:] }} {{ u[::-1] }} {{ u|length }}",
     "bc fedcba [1, 3] [3, 4] olléh 5"},
    {"{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
     "01TrueFalse3,12FalseFalse3,23FalseTrue3,"},
    {"{% for m in e %}x{% else %}empty{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v|length if v is iterable else v }};{% endfor %}",
     "empty b=1;a=5;"},
    {"{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role != 'system' %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.n }}",
     "2"},
    {"{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "12121"},
    {"[{{ nothing }}]{{ nothing is defined }}{{ nothing is undefined }}{{ none is none }}{{ d is mapping }}{{ e is sequence }}{{ nothing|length }}{{ nothing|default('z') }}{{ ''|default('y', true) }}",
     "[]FalseTrueTrueTrueTrue0zy"},
    {"{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 'b' in d }} {{ not true }} {{ true and 'x' }} {{ false or 'y' }} {{ 1 == 1.0 }}",
     "True True True False x y True"},
    {"{{ 'yes' if n > 3 else 'no' }} [{{ 'yes' if n > 30 }}]", "yes []"},
    {"{{ ['a','b'] | join(', ') }} {{ [3,1] | first }}{{ [3,1] | last }} {{ 'a-b' | replace('-', '+') }} {{ '42' | int + 1 }} {{ d | items | list | length }}",
     "a, b 31 a+b 43 2"},
    {"{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}",
     "1 system,assistant"},
    {"{{ 'a,b'.split(',') }} {{ ' a  b '.split() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('x') }} {{ d.get('zz', 'dd') }} {{ d.keys()|list }}",
     "['a', 'b'] ['a', 'b'] True False dd ['b', 'a']"},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('x') }} {{ greet('y', '?') }} {{ greet(name='z') }}",
     "Hi x! Hi y? Hi z!"},
    {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "02"},
    // trim_blocks, lstrip_blocks, "-" on either side, a comment on its own line.
    {"a\n  {% if true %}\n  x\n  {% endif %}\nb\n{# c #}\n  {%- if true -%}  y  {%- endif %}  \n z {{- ' w ' -}} q\n",
     "a\n  x\nb\ny  \n z w q"},
    {"{{ f }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 3.0 }}", "2.5 1e+20 0.30000000000000004 1e-05 3.0"},
    {"{{ messages[0]['role'] }} {{ messages[0].content }} [{{ messages[5] }}]", "system  Sys  []"},
    {"{{ (1, 2) }} {{ {'a': 1}['a'] }} {% set a, b = [1, 2] %}{{ b }} {% set blk %}in {{ n }}{% endset %}{{ blk }}", "(1, 2) 1 2 in 7"},
    {"{% for x in [3,1,2] if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}", "3222"},
    {"{{ 9 is divisibleby 3 }} {{ 3 is odd }} {{ 'a' is string }} {{ 1 is number }} {{ -3|abs }} {{ [1,1,2]|unique|list }}", "True True True True 3 [1, 2]"},
    // indent, dictsort, sort; filter blocks, set blocks with filters, call blocks, raw.
    {"{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb\\n' | indent('> ', blank=true) }}|{{ 'x\\r\\ny' | indent(1) }}",
     "a\n    b\n\n    c|  a\n  b|a\n> \n> b\n> |x\n y"},
    {"{{ {'b': 2, 'A': 3, 'a': 1} | dictsort }} {{ {'b': 2, 'a': 1} | dictsort(by='value', reverse=true) }} {{ {'b': 1, 'B': 0} | dictsort(true) }}",
     "[('A', 3), ('a', 1), ('b', 2)] [('b', 2), ('a', 1)] [('B', 0), ('b', 1)]"},
    {"{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}",
     "[1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] [3, 2, 1] assistant,system,user"},
    {"{% filter upper %}a{{ n }}b{% endfilter %}|{% filter trim | replace('x', 'y') %}  x{{ s }}x  {% endfilter %}|{% filter indent(2) %}\nl1\nl2{% endfilter %}",
     "A7B|y  Hello World  y|l1\n  l2"},
    {"{% set t | trim %}  padded {{ n }}  {% endset %}[{{ t }}]{% set u2 | upper | replace('A', '4') %}abc{% endset %}{{ u2 }}",
     "[padded 7]4BC"},
    {"{% macro box(title) %}<{{ title }}:{{ caller() }}>{% endmacro %}{% for m in messages %}{% call box(m.role) %}{{ m.content | trim }}{{ loop.index }}{% endcall %}{% endfor %}",
     "<system:Sys1><user:Hi2><assistant:Yo3>"},
    {"{% macro each(items) %}{% for i in items %}{{ caller(i, loop.last) }}{% endfor %}{% endmacro %}{% call(x, last) each([1, 2, 3]) %}{{ x * n }}{{ '' if last else ',' }}{% endcall %}",
     "7,14,21"},
    {"{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{% raw -%}   a {{ b }}   {%- endraw %}|\n  {% raw %}\nx\n  {% endraw %}\ny",
     "{{ not evaluated }} {% if %}|a {{ b }}|\n\nx\ny"},
};

TEST(Jinja, RendersEachConstruct) {
  for (const Case& c : kCases) EXPECT_EQ(render(c.source), c.expected) << c.source;
}

TEST(Jinja, AgreesWithJinja2OnEachConstruct) {
  std::vector<testing::JinjaCase> cases;
  for (const Case& c : kCases) cases.push_back({c.source, variables()});
  std::string reason;
  const auto reference = testing::render_with_jinja2(cases, reason);
  if (!reference) GTEST_SKIP() << reason;
  ASSERT_EQ(reference->size(), cases.size()) << reason;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE((*reference)[i].text.has_value()) << cases[i].source << ": " << (*reference)[i].error;
    EXPECT_EQ(render(cases[i].source), *(*reference)[i].text) << cases[i].source;
  }
}

TEST(Jinja, StrftimeNowIsTodaysDate) {
  std::vector<testing::JinjaCase> cases = {{"{{ strftime_now('%d %b %Y') }}", Json::object()}};
  std::string reason;
  const auto reference = testing::render_with_jinja2(cases, reason);
  if (!reference) GTEST_SKIP() << reason;
  ASSERT_EQ(reference->size(), 1u) << reason;
  EXPECT_EQ(render(cases[0].source), *(*reference)[0].text);
}

// The message of the Error `source` throws (at parse or render time).
std::string error_of(std::string_view source, const Json& vars = variables()) {
  try {
    render(source, vars);
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "chat_template");
    return e.what();
  }
  ADD_FAILURE() << "no error from " << source;
  return {};
}

TEST(Jinja, ErrorsNameTheConstructAndItsPosition) {
  EXPECT_EQ(error_of("a\n\n{{ 'x' }}\n  {{ s | wordwrap }}"),
            "[chat_template] line 4, column 10: filter 'wordwrap' is not supported");
  EXPECT_EQ(error_of("{% include 'header.jinja' %}"),
            "[chat_template] line 1, column 4: statement 'include' is not supported");
  EXPECT_EQ(error_of("{% filter wordwrap %}x{% endfilter %}"),
            "[chat_template] line 1, column 11: filter 'wordwrap' is not supported");
  EXPECT_EQ(error_of("{% call x %}y{% endcall %}"),
            "[chat_template] line 1, column 9: a call block needs a macro call");
  EXPECT_EQ(error_of("a {% raw %}x{% endra %}"),
            "[chat_template] line 1, column 3: the raw block is not closed with '{% endraw %}'");
  EXPECT_EQ(error_of("{{ x is foo }}"), "[chat_template] line 1, column 9: test 'foo' is not supported");
  EXPECT_EQ(error_of("{% if true %}x"),
            "[chat_template] line 1, column 15: the template ended inside a block; expected "
            "'{% endif %}'");
  EXPECT_EQ(error_of("{{ 'a' "), "[chat_template] line 1, column 1: the tag is not closed with '}}'");
  EXPECT_EQ(error_of("{{ 1 +  }}"), "[chat_template] line 1, column 9: expected an expression, found '}}'");
  EXPECT_EQ(error_of("{% endfor %}"),
            "[chat_template] line 1, column 4: 'endfor' without an open block it could close");
  // At render time: raise_exception, undefined objects, type errors, unknown methods.
  EXPECT_EQ(error_of("\n {{ raise_exception('Only user and assistant roles') }}"),
            "[chat_template] line 2, column 5: raise_exception: Only user and assistant roles");
  EXPECT_EQ(error_of("{{ x.y }}"), "[chat_template] line 1, column 4: 'x' is undefined");
  EXPECT_EQ(error_of("{{ nope() }}"),
            "[chat_template] line 1, column 4: 'nope' is undefined and cannot be called");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"),
            "[chat_template] line 1, column 8: unsupported operand types for +: 'str' and 'int'");
  EXPECT_EQ(error_of("{{ s.zfill(3) }}"),
            "[chat_template] line 1, column 5: method 'zfill' of 'str' is not supported");
  EXPECT_EQ(error_of("{% set d.x = 1 %}"),
            "[chat_template] line 1, column 4: cannot assign attribute 'x' of 'd', which is not a "
            "namespace()");
}

TEST(Jinja, ErrorsAgreeWithJinja2) {
  // Each of these fails in jinja2 too; the interpreter must not render where jinja2 refuses.
  const char* const failing[] = {"{{ raise_exception('no') }}", "{{ x.y }}", "{{ nope() }}",
                                 "{{ 'a' + 1 }}", "{{ 1 < 'a' }}", "{{ 5 // 0 }}"};
  std::vector<testing::JinjaCase> cases;
  for (const char* source : failing) cases.push_back({source, variables()});
  std::string reason;
  const auto reference = testing::render_with_jinja2(cases, reason);
  if (!reference) GTEST_SKIP() << reason;
  ASSERT_EQ(reference->size(), cases.size()) << reason;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_FALSE((*reference)[i].text.has_value()) << failing[i];
    EXPECT_THROW(render(failing[i]), Error) << failing[i];
  }
}

TEST(Jinja, UndefinedBehavesAsJinjasDefault) {
  EXPECT_EQ(render("[{{ missing }}][{{ missing ~ 'x' }}][{% for i in missing %}i{% endfor %}]"
                   "[{% if missing %}t{% else %}f{% endif %}][{{ messages[0].missing }}]"),
            "[][x][][f][]");
}

TEST(Jinja, TemplateOptionsControlWhitespace) {
  const std::string source = "  {% if true %}\nx\n  {% endif %}\n";
  EXPECT_EQ(model::jinja::Template(source).render(Json::object()), "x\n");
  EXPECT_EQ(
      model::jinja::Template(source, {.trim_blocks = false, .lstrip_blocks = false, .name = "t"})
          .render(Json::object()),
      "  \nx\n  ");
}

}  // namespace
}  // namespace onepass
