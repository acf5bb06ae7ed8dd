; Inno Setup 6 script for SpecDec Chat (Windows x64). See packaging/windows/README.md.
;
;   iscc /DAppVersion=0.1.0 packaging\windows\specdec-chat.iss
;
; AppVersion comes from pyproject.toml (the README's command reads it from there); this script
; holds no version of its own. Input: packaging\dist\specdec-chat\ built by PyInstaller.

#ifndef AppVersion
  #error Pass the version from pyproject.toml: iscc /DAppVersion=X.Y.Z specdec-chat.iss
#endif
#define AppName "SpecDec Chat"
#define AppExe "specdec-chat.exe"
#define DistDir "..\dist\specdec-chat"

[Setup]
AppId={{6F1B7C52-2D4E-4B8B-9A35-5E0C3D7A9C11}
AppName={#AppName}
AppVersion={#AppVersion}
AppPublisher=SpecDec Chat contributors
DefaultDirName={autopf}\{#AppName}
DefaultGroupName={#AppName}
UninstallDisplayIcon={app}\{#AppExe}
SetupIconFile=specdec-chat.ico
OutputDir=..\dist
OutputBaseFilename=specdec-chat-{#AppVersion}-windows-x64-setup
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
; Per-user install by default (no admin); the user may choose all users.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
WizardStyle=modern
; The bundled pair (1.6 GB of GGUF parts) hardly compresses: the installer is > 2 GB, which
; needs disk spanning (setup.exe + .bin slices kept side by side).
Compression=lzma2/normal
SolidCompression=no
DiskSpanning=yes
DiskSliceSize=max
; First start writes the assembled GGUFs + the float32 conversion into the user cache (~11 GB).
ExtraDiskSpaceRequired=11000000000

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#DistDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\{#AppExe}"
Name: "{group}\Uninstall {#AppName}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExe}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; The model cache (assembled + converted embedded pair, ~11 GB) is regenerated on demand;
; chats (user data folder) are kept.
Type: filesandordirs; Name: "{localappdata}\specdec-chat\Cache"
