// The SQL lexer behind AggregateQuery (PostgreSQL's scanner underneath):
// strings, quotes and comments must not be mistaken for calls or keywords,
// and vice versa.
#include "core/sql_lexer.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shardkit/errors.hpp"
#include "shardkit/queries/aggregate_query.hpp"

namespace shardkit::detail {
namespace {

using Type = Token::Type;

// "type:text" per token, for compact expectations.
std::vector<std::string> Kinds(std::string_view sql) {
  std::vector<std::string> out;
  for (const auto& t : Lex(sql)) {
    const char* type = "?";
    switch (t.type) {
      case Type::kIdent:
        type = "ident";
        break;
      case Type::kQuotedIdent:
        type = "qident";
        break;
      case Type::kNumber:
        type = "num";
        break;
      case Type::kString:
        type = "str";
        break;
      case Type::kParam:
        type = "param";
        break;
      case Type::kPunct:
        type = "punct";
        break;
      case Type::kOperator:
        type = "op";
        break;
    }
    out.push_back(std::string(type) + ":" + t.text);
  }
  return out;
}

using V = std::vector<std::string>;

std::string LexError(std::string_view sql) {
  try {
    (void)Lex(sql, "the test text");
  } catch (const UnmergeableQuery& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(SqlLexer, DollarQuotesAreOneStringWhateverTheyHold) {
  EXPECT_EQ(Kinds("$$it's a 'quote' -- not a comment$$"), V{"str:it's a 'quote' -- not a comment"});
  EXPECT_EQ(Kinds("$fn$ median(x) $$ inner $$ $fn$"), V{"str: median(x) $$ inner $$ "});
  EXPECT_EQ(Kinds("$a$x$ab$y$a$"), V{"str:x$ab$y"});  // $ab$ is not the closing $a$
  EXPECT_EQ(Kinds("x = $1 AND y = $23"),
            (V{"ident:x", "op:=", "param:$1", "ident:and", "ident:y", "op:=", "param:$23"}));
  EXPECT_EQ(Kinds("a$b"), V{"ident:a$b"});  // $ inside an identifier is part of it
  EXPECT_NE(LexError("$tag$ never closed").find("unterminated dollar-quoted string"), std::string::npos);
  EXPECT_NE(LexError("x $ y").find("unexpected character '$'"), std::string::npos);
}

TEST(SqlLexer, CommentsNestAndHideEverything) {
  EXPECT_EQ(Kinds("a /* outer /* inner */ still a comment: median(x) */ b"), (V{"ident:a", "ident:b"}));
  EXPECT_EQ(Kinds("a -- median(x)\nb"), (V{"ident:a", "ident:b"}));
  EXPECT_EQ(Kinds("a/**/b"), (V{"ident:a", "ident:b"}));
  EXPECT_NE(LexError("a /* /* */ b").find("unterminated /* comment"), std::string::npos);
  EXPECT_NE(LexError("a /* b").find("the test text \"a /* b\""), std::string::npos);
  // "--" and "/*" start a comment even right after operator characters.
  EXPECT_EQ(Kinds("a+--c\n1"), (V{"ident:a", "op:+", "num:1"}));
  EXPECT_EQ(Kinds("a*/*c*/2"), (V{"ident:a", "op:*", "num:2"}));
}

TEST(SqlLexer, StringsStandardAndWithEscapes) {
  // Standard strings: '' is a quote, a backslash is just a backslash.
  EXPECT_EQ(Kinds("'it''s'"), V{"str:it's"});
  EXPECT_EQ(Kinds("'C:\\dir\\'"), V{"str:C:\\dir\\"});
  // E'' strings: backslash escapes, so \' does not end the string.
  EXPECT_EQ(Kinds("E'it\\'s (select)'"), V{"str:it's (select)"});
  EXPECT_EQ(Kinds("e'a\\\\' || x"), (V{"str:a\\", "op:||", "ident:x"}));
  EXPECT_EQ(Kinds("E'two''quotes'"), V{"str:two'quotes"});
  // B'', X'' constants (N'' is NCHAR and a string, as the server reads
  // it); E as a column name stays an identifier.
  EXPECT_EQ(Kinds("B'101' X'ff' N'n' e"), (V{"str:101", "str:ff", "ident:n", "str:n", "ident:e"}));
  EXPECT_NE(LexError("'open").find("unterminated quoted string"), std::string::npos);
  EXPECT_NE(LexError("E'ends in a backslash\\'").find("unterminated quoted string"), std::string::npos);
  EXPECT_NE(LexError("\"open").find("unterminated quoted identifier"), std::string::npos);
}

TEST(SqlLexer, IdentifiersNumbersAndOperators) {
  EXPECT_EQ(Kinds("\"Mixed\"\"Case\" MiXed"), (V{"qident:Mixed\"Case", "ident:mixed"}));
  EXPECT_EQ(Kinds("1.5e10 .5 3 x::numeric"), (V{"num:1.5e10", "num:.5", "num:3", "ident:x", "op:::", "ident:numeric"}));
  // A multi-character operator cannot end in + or - unless it has one of ~!@#%^&|`?.
  EXPECT_EQ(Kinds("a*-1"), (V{"ident:a", "op:*", "op:-", "num:1"}));
  EXPECT_EQ(Kinds("a <= -1"), (V{"ident:a", "op:<=", "op:-", "num:1"}));
  EXPECT_EQ(Kinds("a @- b"), (V{"ident:a", "op:@-", "ident:b"}));
  EXPECT_EQ(Kinds("t.\"col\"[1]"), (V{"ident:t", "punct:.", "qident:col", "punct:[", "num:1", "punct:]"}));
  EXPECT_NE(LexError("a { b").find("unexpected character '{'"), std::string::npos);
}

TEST(SqlLexer, WhatTheAggregateParserSeesThroughIt) {
  // Calls hidden in strings, comments and quotes are not calls.
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("count(*) FILTER (WHERE note <> $$median(x)$$)", "n"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("sum(x) /* random() */", "s"));
  EXPECT_NO_THROW((void)AggregateQuery::From("t").Select("count(*) FILTER (WHERE note = E'now\\' (select')", "n"));
  EXPECT_THROW((void)AggregateQuery::From("t").Select("sum(x) /* open", "s"), UnmergeableQuery);
}

}  // namespace
}  // namespace shardkit::detail
