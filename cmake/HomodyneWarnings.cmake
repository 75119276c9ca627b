# Warnings (errors when HOMODYNE_WERROR is ON, as in CI).
function(homodyne_set_warnings target)
  set(warnings -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wconversion-null
      -Wno-sign-compare)
  if(HOMODYNE_WERROR)
    list(APPEND warnings -Werror)
  endif()
  # Our own code only: not passed on to programs that link an installed homodyne.
  target_compile_options(${target} INTERFACE
    "$<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:${warnings}>>")
endfunction()
