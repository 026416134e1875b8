-- pandoc filter for the man pages: section headings in capitals, as man(7)
-- expects (NAME, SYNOPSIS, ...); the docs keep their own capitalisation.
function Header(el)
  if el.level == 1 then
    return pandoc.walk_block(el, {
      Str = function(s) return pandoc.Str(s.text:upper()) end,
      Code = function(c) return pandoc.Code(c.text:upper()) end,
    })
  end
end
